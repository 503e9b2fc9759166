"""Engine builder and profiler: the code that runs in the build Job (`tailpilot build` / `profile`)."""
