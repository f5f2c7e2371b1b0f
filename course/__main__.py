"""``python -m course``: the same as the ``course`` command."""

import sys

from course.cli import main

sys.exit(main())
