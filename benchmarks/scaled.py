"""Scaled copies of an example spec: rows and declared totals multiplied, everything else as written."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def scaled_spec(source: Path, factor: int, out_dir: Path) -> Path:
    """Write ``source`` with every table's rows and every curve target multiplied by ``factor``."""
    data = yaml.safe_load(source.read_text())
    for table in data["tables"].values():
        table["rows"] = int(table["rows"]) * factor
        for col in table["columns"].values():
            if col.get("type") == "int" and col.get("unique") and "max" in col:
                col["max"] = int(col["max"]) * factor
    for curve in data.get("outcome_curves", []):
        for point in curve["curve_points"]:
            for key in ("target_value", "value", "target", "amount"):
                if key in point:
                    value = round(point[key] * factor, 2)
                    point[key] = value + 0.37 if value == int(value) else value  # keep the cents
    out_dir.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^a-z0-9_]", "_", f"{data.get('name', source.stem)}_x{factor}")
    data["name"] = name
    path = out_dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
