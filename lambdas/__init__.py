"""The code of the Lambda functions the constructs deploy, one folder each (``locked_workflow.lambdas``
in the wheel and the editable install: ``[tool.setuptools]`` in pyproject.toml).

A package, not a namespace folder: setuptools' editable install finds a mapped subpackage only by
its ``__init__.py``."""
