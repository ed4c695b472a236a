"""WeCom's callback crypto: the ``msg_signature``, the AES-256-CBC envelope, and a guarded XML reader.

``msg_signature`` is the hex SHA-1 of the sorted strings [token, timestamp, nonce, ciphertext] joined without a
separator. The ciphertext is base64 of AES-256-CBC with key = base64-decode(EncodingAESKey + "="), IV = the key's
first 16 bytes, PKCS#7 padding to 32-byte blocks; the plaintext is 16 random bytes, the message's length as 4
bytes big-endian, the message, and the corp id it is for (checked: a message sealed for another corp is refused).

The XML is read with expat directly, refusing any document type declaration or entity (no DTD, no expansion), and
only the root's children are kept as text: WeCom's messages are flat.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import struct
import xml.parsers.expat

__all__ = ["CryptoError", "XmlError", "open_sealed", "parse_flat_xml", "signature", "signed"]

MAX_XML_ELEMENTS = 200


class CryptoError(ValueError):
    """A ciphertext that does not open with the app's key, or is not for its corp."""


class XmlError(ValueError):
    """A body that is not the flat XML WeCom sends (or declares a DTD or entities)."""


def signature(token: str, timestamp: str, nonce: str, ciphertext: str) -> str:
    """The ``msg_signature`` WeCom computes for these values."""
    return hashlib.sha1("".join(sorted([token, timestamp, nonce, ciphertext])).encode()).hexdigest()


def signed(expected_signature: str, token: str, timestamp: str, nonce: str, ciphertext: str) -> bool:
    """Whether ``expected_signature`` is the signature of these values (compared in constant time)."""
    computed = signature(token, timestamp, nonce, ciphertext)
    return hmac.compare_digest(expected_signature.strip().lower().encode(), computed.encode())


def open_sealed(aes_key: bytes, ciphertext: str, corp_id: str) -> bytes:
    """The message inside ``ciphertext``; :class:`CryptoError` when it does not open or names another corp."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    try:
        data = base64.b64decode(ciphertext, validate=True)
    except (binascii.Error, ValueError):
        raise CryptoError("the ciphertext is not base64") from None
    if not data or len(data) % 32:
        raise CryptoError("the ciphertext is not a whole number of 32-byte blocks")
    decryptor = Cipher(algorithms.AES(aes_key), modes.CBC(aes_key[:16])).decryptor()
    padded = decryptor.update(data) + decryptor.finalize()
    pad = padded[-1]
    if not 1 <= pad <= 32 or padded[-pad:] != bytes([pad]) * pad:
        raise CryptoError("the ciphertext does not decrypt with the app's EncodingAESKey (bad padding)")
    plain = padded[:-pad]
    if len(plain) < 20:
        raise CryptoError("the plaintext is too short")
    (length,) = struct.unpack(">I", plain[16:20])
    if 20 + length > len(plain):
        raise CryptoError("the plaintext's length field runs past its end")
    message, receiver = plain[20 : 20 + length], plain[20 + length :]
    if not hmac.compare_digest(receiver, corp_id.encode()):
        raise CryptoError(f"the message is for corp {receiver[:64].decode('utf-8', 'replace')!r}, not {corp_id!r}")
    return message


def parse_flat_xml(data: bytes) -> dict[str, str]:
    """The text of each child of the root element; :class:`XmlError` for a DTD, an entity or bad XML."""
    parser = xml.parsers.expat.ParserCreate()
    fields: dict[str, str] = {}
    depth = 0
    current: list[str] = []
    count = 0

    def refuse_dtd(*_: object) -> None:
        raise XmlError("a document type declaration is not allowed")

    def refuse_entity(*_: object) -> None:
        raise XmlError("entity declarations are not allowed")

    def start(name: str, _attributes: dict[str, str]) -> None:
        nonlocal depth, count
        depth += 1
        count += 1
        if count > MAX_XML_ELEMENTS:
            raise XmlError(f"more than {MAX_XML_ELEMENTS} elements")
        if depth == 2:
            current.clear()

    def end(name: str) -> None:
        nonlocal depth
        if depth == 2:
            fields[name] = "".join(current)
        depth -= 1

    def text(data: str) -> None:
        if depth == 2:
            current.append(data)

    parser.StartDoctypeDeclHandler = refuse_dtd
    parser.EntityDeclHandler = refuse_entity
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = text
    try:
        parser.Parse(data, True)
    except xml.parsers.expat.ExpatError as exc:
        raise XmlError(f"not well-formed XML ({exc})") from None
    return fields
