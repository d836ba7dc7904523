"""Partitions: one dynamic partition per pack (spec file stem); rotations are steps inside a pack's run.

Defined beside the assets (``assets.common``), which need it at decoration time; imports only go
down the layers, so this module re-exports it for the wiring.
"""

from assets.common import PACK_KEY, PACKS

__all__ = ["PACKS", "PACK_KEY"]
