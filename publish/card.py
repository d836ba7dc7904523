"""The dataset card on the Hub is the pack's own README.md, uploaded unchanged.

``evalpack build`` writes it (``evalpack.pack.card.render_card``) before the attestation, so it is one of
the attested files and a downloaded snapshot of the repo passes ``evalpack verify``. Publishing never
rewrites it; it only checks that the card's ``configs:`` block names exactly the files the Hub layout
uploads (both come from ``evalpack.pack.card.hub_configs``), since without the right block ``load_dataset``
silently reads the wrong files. A pack built before evalpack wrote cards, or whose card disagrees with
its manifest, is refused with the advice to rebuild it.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from evalpack.pack.card import CARD, Config, configs_metadata, read_card_metadata
from publish.errors import PublishError


def hub_card(pack: Path, configs: tuple[Config, ...]) -> bytes:
    """The bytes of ``pack``'s README.md, after checking its ``configs:`` block matches ``configs``."""
    path = Path(pack) / CARD
    if not path.is_file():
        raise PublishError(f"{path}: missing; the pack has no dataset card (it was built before evalpack wrote "
                           f"one): rebuild it with `evalpack build`")
    try:
        metadata = read_card_metadata(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise PublishError(f"{path}: unreadable YAML header ({exc}); rebuild the pack") from exc
    expected = configs_metadata(configs)
    if metadata.get("configs") != expected:
        stated = [c.get("config_name") for c in metadata.get("configs") or [] if isinstance(c, dict)]
        raise PublishError(f"{path}: its `configs:` block ({', '.join(map(str, stated)) or 'none'}) does not name "
                           f"the files the Hub layout uploads ({', '.join(c.name for c in configs)}, from "
                           f"manifest.json); rebuild the pack so its card and manifest agree")
    return path.read_bytes()
