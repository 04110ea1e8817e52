"""The worker process: `sessionsearch worker` runs Dramatiq workers and exports their metrics."""
