"""Lambda code assets whose hash depends on the code only.

pip compiles an installed package's ``.py`` files into ``__pycache__/*.pyc`` at install time,
and Python does again whenever a module is imported (tests, ``cdk synth``). Those files differ
between installs, machines and Python versions, so an asset that includes them gets a new hash
- and CloudFormation redeploys the function - although no code changed. Every Lambda asset of
this package leaves them out (``exclude`` of ``Code.from_asset``: glob patterns, see
https://docs.aws.amazon.com/cdk/api/v2/python/aws_cdk/AssetOptions.html).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable, Mapping

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_

#: Never part of a Lambda asset.
ASSET_EXCLUDES = ("__pycache__", "*.pyc")


def lambda_code(folder: Path | str, **options: Any) -> lambda_.AssetCode:
    """``Code.from_asset(folder)`` without compiled files (``options``: more ``AssetOptions``;
    an ``exclude`` given is extended)."""
    exclude = [*ASSET_EXCLUDES, *options.pop("exclude", [])]
    return lambda_.Code.from_asset(str(folder), exclude=exclude, **options)


@jsii.implements(ILocalBundling)
class _CopyFiles:
    """Local bundling (no Docker): copies ``files()`` (path in the output -> source)."""

    def __init__(self, files: Callable[[], Mapping[str, Path]]) -> None:
        self._files = files

    def try_bundle(self, output_dir: str, *_: Any, **__: Any) -> bool:
        copy_files(self._files(), Path(output_dir))
        return True


def copy_files(files: Mapping[str, Path], out: Path) -> None:
    """Copy ``files`` (path below ``out`` -> source) into the folder ``out``."""
    for name, source in files.items():
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def bundled_code(source: Path | str, files: Callable[[], Mapping[str, Path]]) -> lambda_.AssetCode:
    """A code asset made at synth from ``files()`` (path in the asset -> source file), hashed on
    that output; ``source`` is the folder the asset names (CDK needs one)."""
    return lambda_code(
        source,
        asset_hash_type=AssetHashType.OUTPUT,
        bundling=BundlingOptions(image=DockerImage.from_registry("unused-local-bundling"), local=_CopyFiles(files)),
    )
