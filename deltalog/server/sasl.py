"""SASL on a connection of ``deltalog serve``, as Kafka's ``SaslServerAuthenticator``: the mechanisms PLAIN
(RFC 4616, Kafka's ``PlainSaslServer``) and SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802 and 7677, Kafka's
``ScramSaslServer``), the request flow of KIP-43 and KIP-152.

Before a connection is authenticated only two requests are answered (``SaslServerAuthenticator.handleKafkaRequest``):
ApiVersions (once, so a client can learn the versions) and SaslHandshake. A handshake naming an enabled mechanism
moves the connection on; one naming another gets Kafka's ``UNSUPPORTED_SASL_MECHANISM`` (33) with the enabled list,
then the connection is closed. After a SaslHandshake v1 the client sends its SASL tokens in SaslAuthenticate
requests (v0..v2, KIP-152: a failure is answered with ``SASL_AUTHENTICATION_FAILED`` (58) and a message, then the
connection is closed); after a SaslHandshake v0 the tokens travel raw, each a size-prefixed frame without a Kafka
header, and a failure just closes the connection (the v0 framing has no room for an error). Any other request
before authentication closes the connection unanswered (Kafka's ``IllegalSaslStateException``), so nothing of the
store is read or written for an unauthenticated client. Once authenticated, the connection is served like any
other; a second SaslHandshake or SaslAuthenticate is answered with ``ILLEGAL_SASL_STATE`` (34), as
``KafkaApis.handleSaslHandshakeRequest`` does when re-authentication (``connections.max.reauth.ms``) is off.

Frames before authentication are limited to ``sasl.server.max.receive.size`` (Kafka's default 524288 bytes).
"""

from __future__ import annotations

import base64
import hmac
import logging
import re
import secrets
import string
from collections.abc import Callable, Mapping
from typing import Any

from deltalog import scram
from deltalog.errors import DeltalogError, ProtocolError, SaslAuthenticationError
from deltalog.server import protocol as p

log = logging.getLogger(__name__)

#: The mechanisms deltalog serves (Kafka also has GSSAPI and OAUTHBEARER, which need a KDC or a token issuer).
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: Kafka's ``sasl.server.max.receive.size`` default: the largest frame read before authentication.
DEFAULT_MAX_RECEIVE_SIZE = 524_288
SASL_HANDSHAKE_KEY = int(p.SaslHandshakeRequest.API_KEY)
SASL_AUTHENTICATE_KEY = int(p.SaslAuthenticateRequest.API_KEY)

#: A SCRAM credential lookup: (user, mechanism) -> the credential, or None.
ScramLookup = Callable[[str, str], "scram.ScramCredential | None"]


# -- mechanisms -------------------------------------------------------------------------------------------------

class PlainServer:
    """RFC 4616 ``[authzid] NUL authcid NUL passwd``, checked against the listener's PLAIN users (Kafka's
    ``PlainSaslServer`` with ``PlainServerCallbackHandler``: the JAAS ``user_<name>="<password>"`` options)."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self.users = users
        self.principal: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise SaslAuthenticationError("Invalid SASL/PLAIN response: expected 3 tokens, got "
                                          f"{len(parts)}")
        try:
            authzid, user, password = (x.decode("utf-8") for x in parts)
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid SASL/PLAIN response: not UTF-8") from None
        if not user:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self.users.get(user)
        # compare even for an unknown user, so the time taken does not tell which users exist
        ok = hmac.compare_digest(password.encode("utf-8"), (expected or "\x00" + password).encode("utf-8"))
        if expected is None or not ok:
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise SaslAuthenticationError("Authentication failed: Client requested an authorization id that is "
                                          "different from username")
        self.principal = user
        return b""

    @property
    def complete(self) -> bool:
        return self.principal is not None


_CLIENT_FIRST = re.compile(r"(?P<gs2>(?P<cb>[ny]|p=[^,]*),(a=(?P<authzid>[^,]*))?,)"
                           r"(?P<bare>n=(?P<user>[^,]*),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)(?P<ext>(,[a-zA-Z]+=[^,]*)*))")
_CLIENT_FINAL = re.compile(r"(?P<without_proof>c=(?P<cb>[A-Za-z0-9+/=]*),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)"
                           r"(,[a-zA-Z]+=[^,]*)*?),p=(?P<proof>[A-Za-z0-9+/=]+)")


_NONCE_CHARS = string.ascii_letters + string.digits
#: Keys the made-up salts of unknown users for this process: a user's salt is the same on every attempt (a changing
#: one would tell), and unpredictable to a client.
_UNKNOWN_USER_KEY = secrets.token_bytes(32)


def invalid_credentials(mechanism: str) -> str:
    """The one message a failed SASL login gets, whatever failed (Kafka's ``SaslServerAuthenticator`` answers every
    ``SaslException`` of a mechanism with it)."""
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


def _unknown_user_credential(user: str) -> scram.ScramCredential:
    """A credential no password matches, with a salt derived from the user name: the exchange of an unknown user
    looks like a known user's up to the refused proof."""
    salt = hmac.new(_UNKNOWN_USER_KEY, user.encode("utf-8"), "sha256").digest()  # 32 bytes, as make_credential's
    return scram.ScramCredential(salt=salt, server_key=secrets.token_bytes(32), stored_key=secrets.token_bytes(32),
                                 iterations=scram.MIN_ITERATIONS)


def _saslname(name: str) -> str:
    """RFC 5802's ``saslname``: ``=2C`` is a comma, ``=3D`` an equals sign, any other ``=`` is not allowed."""
    if re.search(r"=(?!2C|3D)", name):
        raise SaslAuthenticationError("Authentication failed: invalid user name encoding")
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """RFC 5802's server side (Kafka's ``ScramSaslServer``): client-first -> server-first (the nonce, the user's salt
    and iteration count) -> client-final (the proof, checked against the stored key) -> server-final (the server
    signature, which proves to the client that the server holds the user's server key).

    Written here rather than taken from ``scramp`` (a maintained RFC 5802/7677 implementation): scramp's server
    compares the client-final nonce for equality with no option to do otherwise (checked up to scramp 1.5.0), and
    the proof covers the client-final message as sent, so the repeated nonce of librdkafka up to 2.0 (Debian's kcat
    1.7; see :meth:`_client_final`) cannot be mended before scramp sees it. Its key derivation is RFC 5802's, checked
    against RFC 7677's test vector (tests/test_endpoint_security.py)."""

    def __init__(self, mechanism: str, lookup: ScramLookup, *, server_nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self.lookup = lookup
        # RFC 5802: the server's part of the nonce, fresh per exchange; alphanumeric like Kafka's
        # ScramFormatter.secureRandomString (clients such as librdkafka 2.0 mishandle a '/' in it). Tests give one.
        self.server_nonce = server_nonce or "".join(secrets.choice(_NONCE_CHARS) for _ in range(32))
        self.state = 0
        self.principal: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid SCRAM message: not UTF-8") from None
        if self.state == 0:
            return self._client_first(text)
        if self.state == 1:
            return self._client_final(text)
        raise SaslAuthenticationError("Unexpected SCRAM message after the exchange completed")

    def _client_first(self, text: str) -> bytes:
        m = _CLIENT_FIRST.fullmatch(text)
        if m is None:
            raise SaslAuthenticationError("Invalid SCRAM client first message")
        if m["cb"].startswith("p="):
            raise SaslAuthenticationError("Authentication failed: channel binding is not supported")
        user = _saslname(m["user"])
        if m["authzid"] and _saslname(m["authzid"]) != user:
            raise SaslAuthenticationError("Authentication failed: Client requested an authorization id that is "
                                          "different from username")
        extensions = dict(e.split("=", 1) for e in m["ext"].split(",")[1:])
        if extensions.get("tokenauth", "false").lower() == "true":
            raise SaslAuthenticationError("Authentication failed: delegation tokens are not supported")
        try:
            credential = self.lookup(user, self.mechanism)
        except DeltalogError as e:  # a damaged document: the user cannot log in, the endpoint goes on
            log.error("SCRAM credential of %r cannot be read: %s", user, e)
            credential = None
        if credential is None:  # RFC 5802 section 5.1: go on with a made-up salt, fail at the proof like a wrong
            log.info("SCRAM login for unknown user %r", user)  # password does, so no answer says who exists
            credential = _unknown_user_credential(user)
        self.user, self.credential, self.gs2 = user, credential, m["gs2"]
        self.nonce = m["nonce"] + self.server_nonce
        self.server_first = (f"r={self.nonce},s={base64.b64encode(credential.salt).decode()},"
                             f"i={credential.iterations}")
        self.client_first_bare = m["bare"]
        self.state = 1
        return self.server_first.encode()

    def _client_final(self, text: str) -> bytes:
        m = _CLIENT_FINAL.fullmatch(text)
        if m is None:
            raise SaslAuthenticationError("Invalid SCRAM client final message")
        # RFC 5802 wants the nonce echoed exactly; librdkafka up to 2.0 (Debian's kcat 1.7) sends its own part
        # twice, which Kafka's ScramSaslServer long accepted by checking that the nonce *ends with* the combined
        # one (newer Kafka compares for equality). deltalog keeps the lenient check so those clients work: the
        # fresh server nonce must still close it, and the proof covers the message as sent, so nothing replays.
        if not m["nonce"].endswith(self.nonce):
            raise SaslAuthenticationError("Invalid client nonce in the final client message")
        if m["cb"] != base64.b64encode(self.gs2.encode()).decode():
            raise SaslAuthenticationError("Invalid channel binding in the final client message")
        auth_message = f"{self.client_first_bare},{self.server_first},{m['without_proof']}".encode()
        mech, cred = self.mechanism, self.credential
        client_signature = scram.hmac_digest(mech, cred.stored_key, auth_message)
        try:
            proof = base64.b64decode(m["proof"], validate=True)
        except ValueError:
            raise SaslAuthenticationError("Invalid SCRAM client proof") from None
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=False))
        if len(proof) != len(client_signature) or not hmac.compare_digest(scram.hash_digest(mech, client_key),
                                                                          cred.stored_key):
            raise SaslAuthenticationError(invalid_credentials(mech))
        server_signature = scram.hmac_digest(mech, cred.server_key, auth_message)
        self.principal = self.user
        self.state = 2
        return b"v=" + base64.b64encode(server_signature)

    @property
    def complete(self) -> bool:
        return self.principal is not None


# -- the per-connection state machine ---------------------------------------------------------------------------

#: The states of ``SaslServerAuthenticator.SaslState`` deltalog goes through.
HANDSHAKE_OR_VERSIONS, HANDSHAKE, AUTHENTICATE, RAW_TOKENS, COMPLETE = (
    "HANDSHAKE_OR_VERSIONS_REQUEST", "HANDSHAKE_REQUEST", "AUTHENTICATE", "AUTHENTICATE_RAW", "COMPLETE")


class SaslServerAuthenticator:
    """One connection's authentication. :meth:`receive` takes each frame until :attr:`complete`; it returns the
    frame to answer with (or None) and whether to close the connection after it, and keeps the request it answered
    in :attr:`answered` (Kafka's request metrics count SASL's requests as any other's)."""

    def __init__(self, mechanisms: tuple[str, ...], plain_users: Mapping[str, str], scram_lookup: ScramLookup,
                 *, max_receive_size: int = DEFAULT_MAX_RECEIVE_SIZE, peer: Any = None) -> None:
        self.mechanisms = mechanisms
        self.plain_users = plain_users
        self.scram_lookup = scram_lookup
        self.max_receive_size = max_receive_size
        self.peer = peer
        self.state = HANDSHAKE_OR_VERSIONS
        self.server: PlainServer | ScramServer | None = None
        self.mechanism: str | None = None
        self.principal: str | None = None
        #: (API key, version, response) of the request the last :meth:`receive` answered; None for a raw token
        #: (SaslHandshake v0's framing: no request header, so no request to count) or a frame not answered.
        self.answered: tuple[int, int, Any] | None = None

    @property
    def complete(self) -> bool:
        return self.state == COMPLETE

    def _answer(self, api_key: int, version: int, correlation_id: int, response: Any, *,
                asked: int | None = None) -> bytes:
        """``response`` encoded at ``version``, kept in :attr:`answered` at the version the request ``asked``."""
        self.answered = (api_key, version if asked is None else asked, response)
        return p.encode_response(api_key, version, correlation_id, response)

    def _close(self, why: str) -> tuple[None, bool]:
        log.warning("closing %s before authentication: %s", self.peer, why)
        return None, True

    def receive(self, frame: bytes) -> tuple[bytes | None, bool]:
        self.answered = None
        if self.state == RAW_TOKENS:
            return self._raw_token(frame)
        try:
            req = p.parse_request(frame)
        except ProtocolError as e:
            return self._close(str(e))
        if req.api_key == p.API_VERSIONS_KEY and self.state == HANDSHAKE_OR_VERSIONS:
            if isinstance(req, p.Unsupported):  # the client retries at a version it is told; the state stays
                return self._answer(req.api_key, 0, req.correlation_id,
                                    p.api_versions_response(0, p.UNSUPPORTED_VERSION), asked=req.api_version), False
            self.state = HANDSHAKE
            return self._answer(req.api_key, req.api_version, req.correlation_id,
                                p.api_versions_response(req.api_version)), False
        if isinstance(req, p.Unsupported):
            return self._close(f"API key {req.api_key} v{req.api_version} is not served")
        if req.api_key == SASL_HANDSHAKE_KEY and self.state in (HANDSHAKE_OR_VERSIONS, HANDSHAKE):
            return self._handshake(req)
        if req.api_key == SASL_AUTHENTICATE_KEY and self.state == AUTHENTICATE:
            return self._authenticate(req)
        return self._close(f"unexpected request (API key {req.api_key}) in SASL state {self.state}")

    def _handshake(self, req: p.Request) -> tuple[bytes | None, bool]:
        mechanism = req.body.mechanism
        cls = req.response_class
        if mechanism not in self.mechanisms:
            log.warning("closing %s: SASL mechanism %r is not enabled (sasl.enabled.mechanisms=%s)", self.peer,
                        mechanism, ",".join(self.mechanisms))
            answer = cls(error_code=p.UNSUPPORTED_SASL_MECHANISM, mechanisms=list(self.mechanisms))
            return self._answer(req.api_key, req.api_version, req.correlation_id, answer), True
        self.mechanism = mechanism
        self.server = (PlainServer(self.plain_users) if mechanism == "PLAIN"
                       else ScramServer(mechanism, self.scram_lookup))
        self.state = AUTHENTICATE if req.api_version >= 1 else RAW_TOKENS
        answer = cls(error_code=p.NONE, mechanisms=list(self.mechanisms))
        return self._answer(req.api_key, req.api_version, req.correlation_id, answer), False

    def _evaluate(self, token: bytes) -> bytes:
        assert self.server is not None
        out = self.server.evaluate(token)
        if self.server.complete:
            self.principal = self.server.principal
            self.state = COMPLETE
            log.info("%s authenticated as User:%s with SASL %s", self.peer, self.principal, self.mechanism)
        return out

    def _authenticate(self, req: p.Request) -> tuple[bytes | None, bool]:
        cls = req.response_class
        try:
            token = self._evaluate(bytes(req.body.auth_bytes or b""))
        except SaslAuthenticationError as e:
            log.warning("closing %s: SASL %s authentication failed: %s", self.peer, self.mechanism, e)
            answer = cls(error_code=p.SASL_AUTHENTICATION_FAILED, error_message=str(e), auth_bytes=b"",
                         session_lifetime_ms=0)
            return self._answer(req.api_key, req.api_version, req.correlation_id, answer), True
        answer = cls(error_code=p.NONE, error_message=None, auth_bytes=token, session_lifetime_ms=0)
        return self._answer(req.api_key, req.api_version, req.correlation_id, answer), False

    def _raw_token(self, frame: bytes) -> tuple[bytes | None, bool]:
        try:
            token = self._evaluate(frame)
        except SaslAuthenticationError as e:
            return self._close(f"SASL {self.mechanism} authentication failed: {e}")
        return len(token).to_bytes(4, "big") + token, False


def after_authentication(request: p.Request) -> Any:
    """KafkaApis' answer to SaslHandshake / SaslAuthenticate on an authenticated (or a PLAINTEXT/SSL) connection:
    ``ILLEGAL_SASL_STATE``, as Kafka's ``handleSaslHandshakeRequest`` / ``handleSaslAuthenticateRequest``."""
    cls = request.response_class
    if request.api_key == SASL_HANDSHAKE_KEY:
        return cls(error_code=p.ILLEGAL_SASL_STATE, mechanisms=[])
    return cls(error_code=p.ILLEGAL_SASL_STATE, error_message="SaslAuthenticate request received after successful "
               "authentication", auth_bytes=b"", session_lifetime_ms=0)


# -- JAAS -------------------------------------------------------------------------------------------------------

_JAAS_ENTRY = re.compile(r"\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)\s*"
                         r"(?P<options>(?:[\w.\-]+\s*=\s*(?:\"(?:[^\"\\]|\\.)*\"|[^\s;\"]+)\s*)*);", re.S)
_JAAS_OPTION = re.compile(r"(?P<key>[\w.\-]+)\s*=\s*(?:\"(?P<quoted>(?:[^\"\\]|\\.)*)\"|(?P<bare>[^\s;\"]+))")
_JAAS_SECTION = re.compile(r"(?P<name>[\w.\-]+)\s*\{(?P<body>[^{}]*)\}\s*;", re.S)
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


def parse_jaas_entries(text: str, where: str) -> list[tuple[str, dict[str, str]]]:
    """The login modules of a JAAS configuration (``<module> required key="value" ...;``, one or more): (module,
    options). Raises :class:`~deltalog.errors.InvalidConfigError` naming ``where`` for text that is not one."""
    from deltalog.errors import InvalidConfigError

    entries, pos, text = [], 0, text.strip()
    while pos < len(text):
        m = _JAAS_ENTRY.match(text, pos)
        if m is None:
            raise InvalidConfigError(f"{where}: not a JAAS login module entry near {text[pos:pos + 60]!r}; expected "
                                     f"e.g. '{PLAIN_LOGIN_MODULE} required user_alice=\"alice-secret\";'")
        options = {o["key"]: (o["quoted"].replace('\\"', '"').replace("\\\\", "\\") if o["quoted"] is not None
                              else o["bare"]) for o in _JAAS_OPTION.finditer(m["options"])}
        entries.append((m["module"], options))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return entries


def parse_jaas_file(text: str, where: str) -> dict[str, list[tuple[str, dict[str, str]]]]:
    """A JAAS file (``java.security.auth.login.config``): section name (``KafkaServer``, or a listener's
    ``sasl_ssl.KafkaServer``) -> its login modules."""
    from deltalog.errors import InvalidConfigError

    text = re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)
    sections = {m["name"]: parse_jaas_entries(m["body"], f"{where} section {m['name']}")
                for m in _JAAS_SECTION.finditer(text)}
    if not sections and text.strip():
        raise InvalidConfigError(f"{where}: no JAAS section found; expected 'KafkaServer {{ ... }};'")
    return sections


def plain_users(entries: list[tuple[str, dict[str, str]]], where: str) -> dict[str, str]:
    """The ``user_<name>="<password>"`` options of PlainLoginModule entries (Kafka's ``PlainServerCallbackHandler``);
    ScramLoginModule entries are accepted and hold no users (SCRAM credentials live in the store)."""
    from deltalog.errors import InvalidConfigError

    users: dict[str, str] = {}
    for module, options in entries:
        if module == PLAIN_LOGIN_MODULE:
            users.update({k.removeprefix("user_"): v for k, v in options.items() if k.startswith("user_")})
        elif module != SCRAM_LOGIN_MODULE:
            raise InvalidConfigError(f"{where}: login module {module} is not served; deltalog serves "
                                     f"{PLAIN_LOGIN_MODULE} and {SCRAM_LOGIN_MODULE}")
    return users
