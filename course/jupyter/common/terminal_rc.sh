# Start-up file of the terminals of the course's JupyterLab: the user's usual bash set-up first,
# then the course's virtual environment, which `make lab` names in COURSE_VENV.
if [ -f ~/.bashrc ]; then
    . ~/.bashrc
fi
if [ -n "$COURSE_VENV" ] && [ -f "$COURSE_VENV/bin/activate" ]; then
    . "$COURSE_VENV/bin/activate"
fi
