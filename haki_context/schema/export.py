"""`python -m haki_context.schema.export [PATH]`: write the served schema's SDL.

With no PATH it rewrites `schema.graphql` in the current directory, in place (the committed
SDL, which tests/test_contract.py keeps current); `-` prints it to standard output instead.
"""

from __future__ import annotations

import sys
from pathlib import Path

from . import export_sdl


def main(path: str = "schema.graphql") -> None:
    """Write the SDL to `path` (rewritten in place), or to standard output for `-`."""
    sdl = export_sdl()
    if path == "-":
        sys.stdout.write(sdl)
        return
    Path(path).write_text(sdl)
    print(f"wrote {path} (rewritten in place)")


if __name__ == "__main__":
    main(*sys.argv[1:])
