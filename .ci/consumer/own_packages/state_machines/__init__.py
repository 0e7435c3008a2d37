"""The app's own state machine builders: a top-level name the library's wheel also installs."""
