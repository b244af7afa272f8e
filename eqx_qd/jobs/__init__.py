"""Run drivers: configs, run folders, logs and plots around the library's algorithms."""
