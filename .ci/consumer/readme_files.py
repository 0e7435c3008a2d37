"""Write the files the README shows into a folder: every fenced block right after a
``<!-- file: PATH -->`` line becomes PATH (the quick start's app, its Lambda function, its
conftest and test). Standard library only: it runs before anything is installed.

    python3 .ci/consumer/readme_files.py README.md DEST [PATH ...]   # only these PATHs if given
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

FILE_BLOCK = re.compile(r"^<!-- file: (\S+) -->\n```[a-z]*\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def readme_files(readme: str) -> dict[str, str]:
    """PATH -> content of every block marked ``<!-- file: PATH -->``."""
    files: dict[str, str] = {}
    for path, content in FILE_BLOCK.findall(readme):
        if path in files:
            raise ValueError(f"the README shows {path} twice")
        files[path] = content
    return files


def main(argv: list[str]) -> int:
    readme, dest, *only = argv
    files = readme_files(Path(readme).read_text())
    missing = [path for path in only if path not in files]
    if missing:
        print(f"readme_files: the README shows no {', '.join(missing)} (have: {', '.join(files)})", file=sys.stderr)
        return 1
    for path, content in files.items():
        if only and path not in only:
            continue
        target = Path(dest) / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        print(f"  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
