"""``Authentication-Results`` (RFC 8601) read by its grammar, and whether it vouches for a From domain.

A receiving server records what it verified (SPF, DKIM, DMARC) in this header, prepended above the ones already
there. Much of it is copied from the mail being judged (the envelope sender, signing domains, text in comments),
so it is read token by token, never searched: a comment (``(signature was dmarc=pass)``), a quoted string or an
address such as ``smtp.mailfrom=dmarc=pass@evil.com`` is a value, not a result. The raw header is read, with no
RFC 2047 decoding (an encoded word in a comment stays a comment). Anything outside the grammar is an
:class:`AuthResError`: a header that cannot be read vouches for nothing.

The grammar (RFC 8601 section 2.2, CFWS allowed between tokens)::

    authres-payload = authserv-id [ version ] ( ";" "none" / 1*resinfo )
    resinfo  = ";" method [ "/" version ] "=" result [ "reason" "=" value ] *( ptype "." property "=" pvalue )
    value    = token / quoted-string;  pvalue = value / [ [ local-part ] "@" ] domain-name
"""

from __future__ import annotations

import re

import msgspec

__all__ = ["AuthResError", "AuthResult", "AuthResults", "dmarc_problem", "parse_authres"]

_KEYWORD = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?")
_DIGITS = re.compile(r"[0-9]+")
_TOKEN = re.compile(r"[!#$%&'*+\-.0-9A-Z^_`a-z{|}~]+")  # RFC 2045: no space, controls or tspecials
# A token, or a dot-atom local-part, "@" and a domain (atext adds "/", "=" and "?"; "[" "]" ":" for literals).
_PVALUE = re.compile(r"[!#$%&'*+\-./0-9:=?@A-Z\[\]^_`a-z{|}~]+")
_WSP = " \t"
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # controls other than tab


class AuthResError(ValueError):
    """An ``Authentication-Results`` value outside the RFC 8601 grammar; the message names what and where."""


class AuthResult(msgspec.Struct, frozen=True, kw_only=True):
    """One method's result: ``dkim=pass header.d=example.com`` is ``dkim``, ``pass``, ``(("header.d", …),)``."""

    method: str  # lower case
    result: str  # lower case
    properties: tuple[tuple[str, str], ...]  # ("ptype.property" in lower case, value as written)

    def values(self, name: str) -> list[str]:
        """The values of the property ``name`` (``header.from``), in order."""
        return [value for key, value in self.properties if key == name]


class AuthResults(msgspec.Struct, frozen=True, kw_only=True):
    """One ``Authentication-Results`` header: who wrote it and what it reports."""

    authserv_id: str  # lower case
    results: tuple[AuthResult, ...]  # empty for "none"


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def fail(self, problem: str) -> AuthResError:
        near = self.text[self.at : self.at + 20]
        where = f"at {near!r}" if near else "at the end"
        return AuthResError(f"{problem} {where} (character {self.at + 1})")

    def peek(self) -> str:
        return self.text[self.at : self.at + 1]

    def cfws(self) -> bool:
        """Skip folding white space and comments (nested, with quoted pairs); whether any was there."""
        start = self.at
        while self.at < len(self.text):
            char = self.text[self.at]
            if char in _WSP:
                self.at += 1
            elif char == "(":
                self._comment()
            else:
                break
        return self.at > start

    def _comment(self) -> None:
        opened = self.at
        depth = 0
        while self.at < len(self.text):
            char = self.text[self.at]
            self.at += 1
            if char == "\\":
                self.at += 1
            elif char == "(":
                depth += 1
            elif char == ")":
                depth -= 1
                if depth == 0:
                    return
            elif _CONTROL.match(char):
                self.at -= 1
                raise self.fail("a control character in a comment")
        self.at = opened
        raise self.fail("an unterminated comment")

    def take(self, pattern: re.Pattern[str], what: str) -> str:
        found = pattern.match(self.text, self.at)
        if found is None:
            raise self.fail(f"expected {what}")
        self.at = found.end()
        return found.group()

    def expect(self, char: str) -> None:
        self.cfws()
        if self.peek() != char:
            raise self.fail(f"expected {char!r}")
        self.at += 1
        self.cfws()

    def quoted(self) -> str:
        opened = self.at
        self.at += 1  # the opening quote
        kept: list[str] = []
        while self.at < len(self.text):
            char = self.text[self.at]
            self.at += 1
            if char == '"':
                return "".join(kept)
            if char == "\\" and self.at < len(self.text):
                char = self.text[self.at]
                self.at += 1
            elif _CONTROL.match(char):
                self.at -= 1
                raise self.fail("a control character in a quoted string")
            kept.append(char)
        self.at = opened
        raise self.fail("an unterminated quoted string")

    def value(self, pattern: re.Pattern[str], what: str) -> str:
        if self.peek() == '"':
            text = self.quoted()
            if pattern is _PVALUE and self.peek() == "@":  # a quoted local-part
                return f"{text}{self.take(_PVALUE, what)}"
            return text
        return self.take(pattern, what)

    def keyword(self, what: str) -> str:
        return self.take(_KEYWORD, what).lower()

    def result(self) -> AuthResult:
        self.cfws()
        method = self.keyword("a method name")
        self.cfws()
        if self.peek() == "/":
            self.expect("/")
            self.take(_DIGITS, "a method version")
        self.expect("=")
        result = self.keyword("a result")
        properties: list[tuple[str, str]] = []
        reason_allowed = True  # a reason comes once, right after the result
        while self.cfws() and self.peek() not in ("", ";"):
            name = self.keyword("a property type such as header")
            self.cfws()
            if name == "reason" and reason_allowed and self.peek() == "=":
                reason_allowed = False
                self.expect("=")
                self.value(_TOKEN, "a reason")
                continue
            reason_allowed = False
            self.expect(".")
            name = f"{name}.{self.keyword('a property such as from')}"
            self.expect("=")
            properties.append((name, self.value(_PVALUE, "a property value")))
        return AuthResult(method=method, result=result, properties=tuple(properties))


def parse_authres(value: str) -> AuthResults:
    """The header ``value`` (raw, folded or not) read by the RFC 8601 grammar; :class:`AuthResError` outside it."""
    reader = _Reader(re.sub(r"\r?\n(?=[ \t])", "", value))
    reader.cfws()
    authserv_id = reader.value(_TOKEN, "the authserv-id (the name of the server that wrote the header)")
    if reader.cfws() and _DIGITS.match(reader.text, reader.at):
        reader.take(_DIGITS, "a version")
        reader.cfws()
    if reader.peek() != ";":
        raise reader.fail("expected ';' and the results")
    results: list[AuthResult] = []
    while reader.peek() == ";":
        reader.at += 1
        if not results:
            mark = reader.at
            reader.cfws()
            if reader.text[reader.at : reader.at + 4].lower() == "none":
                reader.at += 4
                reader.cfws()
                if reader.peek() == "":
                    return AuthResults(authserv_id=authserv_id.lower(), results=())
            reader.at = mark
        results.append(reader.result())
        reader.cfws()
    if reader.peek() != "":
        raise reader.fail("expected ';' or the end")
    return AuthResults(authserv_id=authserv_id.lower(), results=tuple(results))


def dmarc_problem(results: AuthResults, domain: str) -> str | None:
    """Why ``results`` do not vouch for mail from ``domain``; ``None`` when they report exactly one DMARC result,
    ``pass``, whose ``header.from`` is ``domain`` (compared case-insensitively)."""
    server = results.authserv_id
    dmarc = [result for result in results.results if result.method == "dmarc"]
    if not dmarc:
        return f"{server} reports no dmarc result"
    if len(dmarc) > 1:
        return f"{server} reports {len(dmarc)} dmarc results"
    (only,) = dmarc
    if only.result != "pass":
        return f"{server} reports dmarc={only.result}"
    checked = only.values("header.from")
    if len(checked) != 1:
        return f"{server} reports dmarc=pass with {len(checked) or 'no'} header.from"
    if checked[0].lower() != domain.lower():
        return f"{server} reports dmarc=pass for {checked[0][:100]}, not for the From domain {domain}"
    return None
