"""multipart/form-data bodies built by hand, so a test controls every byte (a cut-off end, a part
without a name, a format the filename does not tell)."""

from __future__ import annotations

Part = tuple[str, str | None, bytes]  # (name, filename or None for a text field, value)


def multipart(boundary: str, *parts: Part) -> bytes:
    body = b""
    for name, filename, value in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        body += f"--{boundary}\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + value + b"\r\n"
    return body + f"--{boundary}--\r\n".encode()
