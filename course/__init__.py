"""The course harness: what every notebook imports.

Importing ``course`` does not import numba, so a notebook's first cell can choose the device::

    import course
    course.use_device()          # simulator without an NVIDIA GPU, the GPU with one

Everything else lives in submodules that import numba on first use:

- ``course.device``: device selection and ``course doctor``
- ``course.simulator``: every simulator-specific trick (warp intrinsics, traffic hooks)
- ``course.checking``: ``check`` against a float64 reference, with diagnoses in words
- ``course.traffic``: global/shared memory traffic counted in the simulator
- ``course.models``: analytic models of bytes moved and FLOPs, one function per kernel rung
- ``course.timing``: CUDA-event timing and the machine's ceilings
- ``course.records``: recorded GPU results as JSON, with device, driver, versions and date
- ``course.plots``: timing, traffic and roofline plots with one look
"""

from course.device import use_device, on_simulator, device_summary

__all__ = ["use_device", "on_simulator", "device_summary"]
