"""Page images the OCR tests read: black text on white, one line per entry, drawn by Pillow."""

from __future__ import annotations

import base64
import io

from PIL import Image, ImageDraw, ImageFont


def text_page(lines: list[str], image_format: str = "PNG") -> tuple[str, list[float]]:
    """A white page with one line of black text per entry; returns it base64 and each line's y centre."""
    page = Image.new("RGB", (960, 120 + 110 * len(lines)), "white")
    draw = ImageDraw.Draw(page)
    font = ImageFont.load_default(size=48)
    centres = []
    for number, line in enumerate(lines):
        _, top, _, bottom = draw.textbbox((60, 60 + 110 * number), line, font=font)
        draw.text((60, 60 + 110 * number), line, fill="black", font=font)
        centres.append((top + bottom) / 2)
    buffer = io.BytesIO()
    page.save(buffer, image_format, **({"quality": 90} if image_format == "JPEG" else {}))
    return base64.b64encode(buffer.getvalue()).decode("ascii"), centres
