"""The app's own Lambda functions: a top-level name the library's wheel also installs."""
