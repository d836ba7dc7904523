"""Hugging Face publishing for evalpack packs: Hub layout, dataset card, upload, version tags.

Layer 2 of ARCHITECTURE.md: imports the engine (``evalpack``), never the reverse. Importing this
package does not import huggingface_hub (a dependency of evalpack); only uploading imports it.

For code (the Dagster ``publish_pack`` job)::

    from publish import publish_pack
    result = publish_pack(Path("packs/retail"), "owner/retail-evalpack")   # token: HF_TOKEN or login
    result.repo_url, result.tag, result.commit_sha, result.tag_url

Modules: ``layout`` (pack -> repo files; configs and splits from ``evalpack.pack.card.hub_configs``), ``card``
(the pack's own README.md, rendered by ``evalpack.pack.card`` at build time and attested, goes up unchanged),
``check`` (re-verification before anything is sent), ``hub`` (create repo, one commit, tag), ``cli``
(``evalpack publish``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from publish.hub import PackRefused, PublishResult, publish_pack
    from publish.layout import HubLayout, PublishError, build_layout

__all__ = ["HubLayout", "PackRefused", "PublishError", "PublishResult", "build_layout", "publish_pack"]
_HOMES = {"PackRefused": "hub", "PublishResult": "hub", "publish_pack": "hub",
          "HubLayout": "layout", "PublishError": "layout", "build_layout": "layout"}


def __getattr__(name: str):
    # the modules load on first use: every `evalpack` command imports this package to register `evalpack
    # publish` and `evalpack diff`, and the Hub client, the pack's checks and the card's Arrow schemas are
    # about 0.25 s of imports that only those commands need
    if name in _HOMES:
        return getattr(importlib.import_module(f"publish.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
