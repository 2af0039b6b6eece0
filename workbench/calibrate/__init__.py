"""Calibration to the user's own hardware: measure (``measure``), run everything (``runner.calibrate``), keep and
apply the result (``profile.HardwareProfile``). ``workbench calibrate`` is the command line."""
from workbench.calibrate.profile import (  # noqa: F401
    NO_PROFILE_NOTE, HardwareProfile, fit_collective, fit_gemm, load_profile, no_profile_record, profile_names,
    resolve_profile, user_profiles_dir,
)
from workbench.calibrate.runner import CalibrationSettings, calibrate, catalog_gpu_for  # noqa: F401
