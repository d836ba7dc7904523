"""Hugging Face publishing for evalpack packs: Hub layout, dataset card, upload, version tags.

Layer 2 of ARCHITECTURE.md: imports the engine (``evalpack``), never the reverse. Importing this
package does not import huggingface_hub (a dependency of evalpack); only uploading imports it.

For code (the Dagster ``publish_pack`` job)::

    from publish import publish_pack
    result = publish_pack(Path("packs/retail"), "owner/retail-evalpack")   # token: HF_TOKEN or login
    result.repo_url, result.tag, result.commit_sha, result.tag_url

Modules: ``layout`` (pack -> repo files; configs and splits from ``evalpack.card.hub_configs``), ``card``
(the pack's own README.md, rendered by ``evalpack.card`` at build time and attested, goes up unchanged),
``check`` (re-verification before anything is sent), ``hub`` (create repo, one commit, tag), ``cli``
(``evalpack publish``).
"""

from __future__ import annotations

from publish.hub import PackRefused, PublishResult, publish_pack
from publish.layout import HubLayout, PublishError, build_layout

__all__ = ["HubLayout", "PackRefused", "PublishError", "PublishResult", "build_layout", "publish_pack"]
