"""`python -m haki_context.schema.export`: write the served schema's SDL to schema.graphql."""

from __future__ import annotations

import sys
from pathlib import Path

from . import export_sdl


def main(path: str = "schema.graphql") -> None:
    Path(path).write_text(export_sdl())
    print(f"wrote {path}")


if __name__ == "__main__":
    main(*sys.argv[1:])
