"""Templates (Jinja2, autoescaped, shipped inside the package) and the few filters they use."""

from __future__ import annotations

import functools
import hashlib
import json
import mimetypes
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Any
from urllib.parse import urlencode

CHART_WIDTH = 300
CHART_HEIGHT = 60


def age(seconds: float | None) -> str:
    """3 s, 4 min 10 s, 2 h 5 min, 3 d 4 h; an em dash for none."""
    if seconds is None:
        return "—"
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def expiry(seconds: float | None) -> str:
    """A lease's end relative to now: "expires in 12 s", "expired 3 min ago"; an em dash for none."""
    if seconds is None:
        return "—"
    return f"expires in {age(seconds)}" if seconds >= 0 else f"expired {age(-seconds)} ago"


def when(moment: datetime | None) -> str:
    return "" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def rate(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def points(values: Sequence[float], capacity: int, ceiling: float) -> str:
    """SVG polyline points: the newest value at the right edge, `capacity` values across the width."""
    if not values:
        return ""
    step = CHART_WIDTH / max(capacity - 1, 1)
    start = CHART_WIDTH - step * (len(values) - 1)
    top = ceiling or 1.0
    return " ".join(
        f"{start + index * step:.1f},{CHART_HEIGHT - (value / top) * (CHART_HEIGHT - 2) - 1:.1f}"
        for index, value in enumerate(values)
    )


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def link(view: str, params: dict[str, Any], **changes: Any) -> str:
    """A page address (`#view?query`): the page keeps its state in the address' fragment."""
    merged = {**params, **changes}
    query = urlencode({key: value for key, value in merged.items() if value not in (None, "", False)})
    return f"#{view}?{query}" if query else f"#{view}"


@functools.cache
def environment() -> Any:
    """The templates' environment, made at the page's first request: an API replica nobody opens the page
    of never imports jinja2."""
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    made = Environment(
        loader=PackageLoader("baton.ui", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    made.filters.update(age=age, expiry=expiry, when=when, rate=rate, pretty=pretty)
    made.globals.update(points=points, link=link, chart_width=CHART_WIDTH, chart_height=CHART_HEIGHT)
    return made


def render(template: str, **context: Any) -> str:
    text: str = environment().get_template(template).render(**context)
    return text


@dataclass(frozen=True)
class StaticFile:
    body: bytes
    media_type: str
    etag: str


def load_static() -> dict[str, StaticFile]:
    """The page's own script and style sheet, read once; nothing is fetched from elsewhere."""
    files = {}
    for entry in resources.files("baton.ui").joinpath("static").iterdir():
        if entry.is_file() and not entry.name.startswith("."):
            body = entry.read_bytes()
            media_type = mimetypes.guess_type(entry.name)[0] or "application/octet-stream"
            files[entry.name] = StaticFile(body, media_type, '"' + hashlib.sha256(body).hexdigest()[:16] + '"')
    return files
