"""Lambda code assets whose hash depends on the code only.

pip compiles an installed package's ``.py`` files into ``__pycache__/*.pyc`` at install time,
and Python does again whenever a module is imported (tests, ``cdk synth``). Those files differ
between installs, machines and Python versions, so an asset that includes them gets a new hash
- and CloudFormation redeploys the function - although no code changed. Every Lambda asset of
this package leaves them out (``exclude`` of ``Code.from_asset``: glob patterns, see
https://docs.aws.amazon.com/cdk/api/v2/python/aws_cdk/AssetOptions.html).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import aws_lambda as lambda_

#: Never part of a Lambda asset.
ASSET_EXCLUDES = ("__pycache__", "*.pyc")


def lambda_code(folder: Path | str, **options: Any) -> lambda_.AssetCode:
    """``Code.from_asset(folder)`` without compiled files (``options``: more ``AssetOptions``;
    an ``exclude`` given is extended)."""
    exclude = [*ASSET_EXCLUDES, *options.pop("exclude", [])]
    return lambda_.Code.from_asset(str(folder), exclude=exclude, **options)
