"""A listener's security, configured with Kafka's broker configs (``KafkaConfig``, ``SslConfigs``,
``BrokerSecurityConfigs``): the protocol of ``listeners=SASL_SSL://0.0.0.0:9093``, TLS from ``ssl.*``, SASL from
``sasl.enabled.mechanisms`` and the listener's JAAS config.

Read the way Kafka reads them: a ``server.properties`` file (Java properties: ``key=value`` or ``key: value``, ``#``
and ``!`` comments, a trailing backslash continues a line) and overrides (``--override key=value``, as
``kafka-server-start.sh``); a listener-prefixed key (``listener.name.sasl_ssl.ssl.keystore.location``) wins over the
plain one (Kafka's ``ListenerName.configPrefix``). The protocols:

============== ======================= ================================================
listener       TLS (Python's ``ssl``)  SASL (:mod:`deltalog.server.sasl`)
============== ======================= ================================================
PLAINTEXT      no                      no: loopback addresses only
SSL            yes                     no (``ssl.client.auth=required`` to check clients)
SASL_PLAINTEXT no                      PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
SASL_SSL       yes                     PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
============== ======================= ================================================

Where deltalog differs from Kafka, and why: one listener per ``deltalog serve`` process (Kafka's broker runs
several; each endpoint registers its listener's name and Metadata names the endpoints of that listener only); keystores and truststores
are PEM only (``ssl.keystore.type=PEM``, Kafka's own PEM support of KIP-651: Python's ``ssl`` reads PEM, not JKS
or PKCS12; convert with ``openssl pkcs12 -in keystore.p12 -nodes -out keystore.pem``), and ``ssl.keystore.type``
left unset means PEM (Kafka's default JKS cannot be read); ``sasl.enabled.mechanisms`` has no default (Kafka's
GSSAPI needs Kerberos, which deltalog does not serve); without ``authorizer.class.name`` an authenticated user may
call every API, as on Kafka; with it, the store's ACLs decide (:mod:`deltalog.server.authorization`).
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from deltalog.errors import InvalidConfigError
from deltalog.server import broker_config, limits, sasl

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = {name: name for name in PROTOCOLS}

#: The broker configs deltalog reads; every other key is reported as unused (Kafka's ``AbstractConfig.logUnused``).
SSL_KEYS = ("ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
            "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.type", "ssl.truststore.location",
            "ssl.truststore.password", "ssl.truststore.certificates", "ssl.client.auth", "ssl.enabled.protocols",
            "ssl.protocol")
KNOWN_KEYS = ("listeners", "advertised.listeners", "listener.security.protocol.map", "sasl.enabled.mechanisms",
              "sasl.server.max.receive.size", "socket.request.max.bytes", *SSL_KEYS, *limits.KEYS.values(),
              *broker_config.KEYS)
_LISTENER = re.compile(r"(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[^\]]*\]|[^:\[\]]*):(?P<port>\d+)")


def load_properties(path: str) -> dict[str, str]:
    """A Java properties file, read by ``jproperties`` with ``java.util.Properties.load``'s rules (``key=value``,
    ``key: value`` or ``key value``; ``#`` and ``!`` comment lines; a line ending in an odd number of backslashes
    continues on the next; ``\\uXXXX`` and the other escapes), as UTF-8 text (Java's default for a ``Reader``)."""
    from jproperties import ParseError, Properties, PropertyError  # the server extra: only serve reads these

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InvalidConfigError(f"cannot read the config file {path}: {e.strerror or e}") from None
    props = Properties()
    try:
        props.load(data, "utf-8")
    except (ParseError, PropertyError, UnicodeDecodeError) as e:
        raise InvalidConfigError(f"the config file {path} is not a Java properties file in UTF-8: {e}") from None
    return dict(props.properties)


def is_loopback(host: str) -> bool:
    """An address, or a host name every address of which is, on the loopback interface (a name such as the
    machine's own in ``/etc/hosts`` mapped to 127.0.1.1)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    if host == "localhost":
        return True
    try:
        found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return False
    return bool(found) and all(ipaddress.ip_address(a[4][0].split("%")[0]).is_loopback for a in found)


@dataclass
class ListenerSecurity:
    """One listener: its name and protocol, where it binds, and what a connection must pass (TLS, SASL)."""

    name: str = "PLAINTEXT"
    protocol: str = "PLAINTEXT"
    host: str = "127.0.0.1"
    port: int = 9092
    advertised: tuple[str, int] | None = None
    ssl_context: ssl.SSLContext | None = None
    client_auth: str = "none"
    mechanisms: tuple[str, ...] = ()
    plain_users: dict[str, str] = field(default_factory=dict, repr=False)
    max_receive_size: int = sasl.DEFAULT_MAX_RECEIVE_SIZE
    max_request_bytes: int | None = None
    unused: list[str] = field(default_factory=list)

    @property
    def is_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def is_tls(self) -> bool:
        return self.protocol.endswith("SSL")

    def describe(self) -> str:
        """What the health line says: the listener, TLS, the SASL mechanisms."""
        parts = [f"{self.name}" + (f" ({self.protocol})" if self.name != self.protocol else "")]
        if self.is_tls:
            parts.append(f"TLS, ssl.client.auth={self.client_auth}")
        if self.is_sasl:
            parts.append("SASL " + ", ".join(self.mechanisms))
        if not self.is_tls and not self.is_sasl:
            parts.append("loopback only: no TLS or SASL")
        return ", ".join(parts)

    def check_bind(self) -> None:
        """A PLAINTEXT listener binds a loopback address only: anyone who reaches it could read and write every
        topic. Raises :class:`InvalidConfigError` naming the configs that allow more."""
        if self.protocol == "PLAINTEXT" and not is_loopback(self.host):
            raise InvalidConfigError(
                f"listener {self.name}://{self.host}:{self.port} is PLAINTEXT on a non-loopback address: without TLS "
                "or SASL deltalog serve listens on 127.0.0.1, ::1 or localhost only. To listen on other addresses "
                "set listeners=SASL_SSL://HOST:PORT (or SSL://, SASL_PLAINTEXT://) with ssl.keystore.location "
                "(ssl.keystore.type=PEM) and sasl.enabled.mechanisms (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), "
                "in a file given to --config or with --override; see docs/kafka-endpoint.md#security")

    def authenticator(self, scram_lookup: sasl.ScramLookup, peer: Any) -> sasl.SaslServerAuthenticator | None:
        """A new connection's authenticator (None on a listener without SASL)."""
        if not self.is_sasl:
            return None
        return sasl.SaslServerAuthenticator(self.mechanisms, self.plain_users, scram_lookup,
                                            max_receive_size=self.max_receive_size, peer=peer)


class _Configs:
    """Lookup with Kafka's listener prefix: ``listener.name.<listener>.<key>`` before ``<key>``."""

    def __init__(self, props: Mapping[str, str], listener: str) -> None:
        self.props = props
        self.prefix = f"listener.name.{listener.lower()}."

    def get(self, key: str, default: str | None = None) -> str | None:
        for k in (self.prefix + key, key):
            value = self.props.get(k)
            if value is not None and value.strip() != "":
                return value.strip()
        return default

    def name(self, key: str) -> str:
        return self.prefix + key if self.prefix + key in self.props else key


def parse_listener(value: str, what: str) -> tuple[str, str, int]:
    """``NAME://HOST:PORT`` -> (name, host, port); an empty host means every address, as Kafka's."""
    items = [v.strip() for v in value.split(",") if v.strip()]
    if len(items) != 1:
        raise InvalidConfigError(f"{what}={value!r}: deltalog serve runs one listener per process; start one "
                                 "deltalog serve per listener (each with its own --config)")
    m = _LISTENER.fullmatch(items[0])
    if m is None or not 0 <= int(m["port"]) <= 65535:
        raise InvalidConfigError(f"{what}={value!r} is not NAME://HOST:PORT, e.g. SASL_SSL://0.0.0.0:9093")
    return m["name"], m["host"].strip("[]") or "0.0.0.0", int(m["port"])


def listener_security(props: Mapping[str, str], *, plain_users_file: str | None = None,
                      jaas_file: str | None = None) -> ListenerSecurity:
    """The listener ``props`` configure (``listeners`` defaults to ``PLAINTEXT://127.0.0.1:9092``). Raises
    :class:`InvalidConfigError` naming the config that is wrong and what is allowed; builds the TLS context (so a
    missing or wrong key file fails here, before anything listens)."""
    name, host, port = parse_listener(props.get("listeners") or "PLAINTEXT://127.0.0.1:9092", "listeners")
    protocol_map = dict(DEFAULT_PROTOCOL_MAP)
    if props.get("listener.security.protocol.map"):
        protocol_map = {}
        for item in props["listener.security.protocol.map"].split(","):
            listener, sep, proto = item.strip().partition(":")
            if not sep or proto.strip() not in PROTOCOLS:
                raise InvalidConfigError(f"listener.security.protocol.map: {item.strip()!r} is not LISTENER:PROTOCOL "
                                         f"with PROTOCOL one of {', '.join(PROTOCOLS)}")
            protocol_map[listener.strip()] = proto.strip()
    if name not in protocol_map:
        raise InvalidConfigError(f"listeners: listener name {name!r} has no security protocol: name it after one of "
                                 f"{', '.join(PROTOCOLS)} or map it in listener.security.protocol.map")
    protocol = protocol_map[name]
    cfg = _Configs(props, name)
    out = ListenerSecurity(name=name, protocol=protocol, host=host, port=port)
    out.check_bind()  # first: the one error a PLAINTEXT listener on every address needs to see
    if props.get("advertised.listeners"):
        _, a_host, a_port = parse_listener(props["advertised.listeners"], "advertised.listeners")
        out.advertised = (a_host, a_port)
    elif host in ("0.0.0.0", "::"):
        raise InvalidConfigError(
            f"listeners={props['listeners']} binds every address, and a client must be told one it can reach (Kafka: "
            f"advertised.listeners cannot use the nonroutable meta-address {host}): set "
            f"advertised.listeners={name}://<a host name clients reach>:{port}")
    out.max_request_bytes = _int(cfg, "socket.request.max.bytes")
    if out.is_tls:
        out.client_auth = (cfg.get("ssl.client.auth", "none") or "none").lower()
        out.ssl_context = ssl_context(cfg)
    if out.is_sasl:
        out.mechanisms = sasl_mechanisms(cfg)
        out.plain_users = plain_users(props, cfg, name, out.mechanisms, plain_users_file, jaas_file)
        out.max_receive_size = _int(cfg, "sasl.server.max.receive.size") or sasl.DEFAULT_MAX_RECEIVE_SIZE
    out.unused = unused_keys(props, name)
    return out


def _int(cfg: _Configs, key: str) -> int | None:
    value = cfg.get(key)
    if value is None:
        return None
    if not value.isdigit() or int(value) <= 0:
        raise InvalidConfigError(f"{cfg.name(key)}={value!r} must be a positive integer")
    return int(value)


def unused_keys(props: Mapping[str, str], listener: str) -> list[str]:
    """Keys deltalog does not read (a Kafka ``server.properties`` has many: ``log.dirs``, ``num.partitions``, ...)."""
    prefix = f"listener.name.{listener.lower()}."
    out = []
    for key in props:
        bare = key.removeprefix(prefix)
        if bare in KNOWN_KEYS or re.fullmatch(r"(plain|scram-sha-256|scram-sha-512)\.sasl\.jaas\.config", bare):
            continue
        out.append(key)
    return out


def sasl_mechanisms(cfg: _Configs) -> tuple[str, ...]:
    value = cfg.get("sasl.enabled.mechanisms")
    if value is None:
        raise InvalidConfigError(
            "sasl.enabled.mechanisms is not set for a SASL listener (Kafka's default GSSAPI is not served): set "
            f"it to one or more of {', '.join(sasl.MECHANISMS)}, e.g. sasl.enabled.mechanisms=SCRAM-SHA-256,PLAIN")
    mechanisms = tuple(m.strip() for m in value.split(",") if m.strip())
    bad = [m for m in mechanisms if m not in sasl.MECHANISMS]
    if bad or not mechanisms:
        raise InvalidConfigError(f"{cfg.name('sasl.enabled.mechanisms')}={value!r}: {', '.join(bad) or 'nothing'} is "
                                 f"not served; deltalog serves {', '.join(sasl.MECHANISMS)}")
    return mechanisms


def plain_users(props: Mapping[str, str], cfg: _Configs, listener: str, mechanisms: tuple[str, ...],
                plain_users_file: str | None, jaas_file: str | None) -> dict[str, str]:
    """PLAIN's users and passwords: the JAAS ``user_<name>="<password>"`` options of
    ``listener.name.<listener>.plain.sasl.jaas.config`` (Kafka's form), of a JAAS file's ``KafkaServer`` section (or
    ``<listener>.KafkaServer``, the file ``java.security.auth.login.config`` names in Kafka), and of a plain users
    file (``user=password`` lines, a properties file: deltalog's own shorthand)."""
    users: dict[str, str] = {}
    key = f"listener.name.{listener.lower()}.plain.sasl.jaas.config"
    if props.get(key):
        users.update(sasl.plain_users(sasl.parse_jaas_entries(props[key], key), key))
    if jaas_file:
        try:
            with open(jaas_file, encoding="utf-8") as f:
                sections = sasl.parse_jaas_file(f.read(), jaas_file)
        except OSError as e:
            raise InvalidConfigError(f"cannot read the JAAS file {jaas_file}: {e.strerror or e}") from None
        section = sections.get(f"{listener.lower()}.KafkaServer", sections.get("KafkaServer"))
        if section is None:
            raise InvalidConfigError(f"{jaas_file}: no KafkaServer (or {listener.lower()}.KafkaServer) section")
        users.update(sasl.plain_users(section, jaas_file))
    if plain_users_file:
        users.update(load_properties(plain_users_file))
    if "PLAIN" in mechanisms and not users:
        raise InvalidConfigError(
            f"sasl.enabled.mechanisms has PLAIN but no PLAIN user is configured: set {key}="
            f"'{sasl.PLAIN_LOGIN_MODULE} required user_alice=\"alice-secret\";' (or give --jaas-config / "
            "--plain-users)")
    if users and "PLAIN" not in mechanisms:
        raise InvalidConfigError(f"PLAIN users are configured but sasl.enabled.mechanisms "
                                 f"({','.join(mechanisms)}) does not enable PLAIN")
    return users


def _pem_file(cfg: _Configs, location_key: str, inline_key: str, what: str) -> tuple[str | None, str | None]:
    """(a path, inline PEM text) of a keystore or truststore given by location or inline (KIP-651)."""
    location, inline = cfg.get(location_key), cfg.get(inline_key)
    if location and inline:
        raise InvalidConfigError(f"both {cfg.name(location_key)} and {cfg.name(inline_key)} are set: give the {what} "
                                 "as a file or inline, not both")
    if location and not os.path.isfile(location):
        raise InvalidConfigError(f"{cfg.name(location_key)}={location}: no such file")
    return location, inline


def _pem_type(cfg: _Configs, key: str, location: str | None) -> None:
    kind = (cfg.get(key) or "").upper()
    if kind and kind != "PEM":
        raise InvalidConfigError(
            f"{cfg.name(key)}={kind}: deltalog reads PEM stores only (Python's ssl module reads no JKS or PKCS12); "
            f"convert it (e.g. openssl pkcs12 -in store.p12 -nodes -out store.pem) and set {key}=PEM")
    if not kind and location:
        with open(location, "rb") as f:
            head = f.read(4096)
        if b"-----BEGIN" not in head:
            raise InvalidConfigError(f"{cfg.name(key.replace('.type', '.location'))}={location} is not PEM (Kafka's "
                                     f"default {key} is JKS, which deltalog does not read): give a PEM file and set "
                                     f"{key}=PEM")


def ssl_context(cfg: _Configs) -> ssl.SSLContext:
    """The server's TLS context: the keystore (its key and certificate chain), the truststore (the CAs whose client
    certificates are accepted), ``ssl.client.auth`` (none, requested, required), ``ssl.enabled.protocols``."""
    location, inline_chain = _pem_file(cfg, "ssl.keystore.location", "ssl.keystore.certificate.chain", "keystore")
    inline_key = cfg.get("ssl.keystore.key")
    if not location and not (inline_chain and inline_key):
        raise InvalidConfigError("a TLS listener (SSL, SASL_SSL) needs a keystore: set ssl.keystore.type=PEM and "
                                 "ssl.keystore.location=<a PEM file with the private key and the certificate chain> "
                                 "(or ssl.keystore.certificate.chain and ssl.keystore.key)")
    _pem_type(cfg, "ssl.keystore.type", location)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    password = cfg.get("ssl.key.password") or cfg.get("ssl.keystore.password")
    try:
        if location:
            context.load_cert_chain(location, password=password)
        else:
            with tempfile.TemporaryDirectory(prefix="deltalog-pem-") as tmp:
                path = os.path.join(tmp, "keystore.pem")
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(_pem_lines(inline_key or "") + "\n" + _pem_lines(inline_chain or "") + "\n")
                context.load_cert_chain(path, password=password)
    except (ssl.SSLError, OSError) as e:
        raise InvalidConfigError(f"the keystore ({cfg.name('ssl.keystore.location') if location else 'inline'}) "
                                 f"cannot be loaded: {e}; it must hold the private key (encrypted with "
                                 "ssl.key.password, or not encrypted) and its certificate chain, in PEM") from None
    trust, trust_inline = _pem_file(cfg, "ssl.truststore.location", "ssl.truststore.certificates", "truststore")
    _pem_type(cfg, "ssl.truststore.type", trust)
    try:
        if trust:
            context.load_verify_locations(cafile=trust)
        elif trust_inline:
            context.load_verify_locations(cadata=_pem_lines(trust_inline))
    except (ssl.SSLError, OSError) as e:
        raise InvalidConfigError(f"the truststore cannot be loaded: {e}; it must hold PEM certificates") from None
    client_auth = (cfg.get("ssl.client.auth") or "none").lower()
    modes = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
    if client_auth not in modes:
        raise InvalidConfigError(f"{cfg.name('ssl.client.auth')}={client_auth!r}: use one of none, requested, required")
    if client_auth != "none" and not (trust or trust_inline):
        raise InvalidConfigError(f"ssl.client.auth={client_auth} needs a truststore (ssl.truststore.location) with "
                                 "the CA that signs the clients' certificates")
    context.verify_mode = modes[client_auth]
    protocols = [x.strip() for x in (cfg.get("ssl.enabled.protocols") or "TLSv1.2,TLSv1.3").split(",") if x.strip()]
    versions = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
    bad = [x for x in protocols if x not in versions]
    if bad or not protocols:
        raise InvalidConfigError(f"{cfg.name('ssl.enabled.protocols')}: {', '.join(bad) or 'nothing'} is not "
                                 "allowed; use TLSv1.2 and/or TLSv1.3")
    context.minimum_version = min(versions[x] for x in protocols)
    context.maximum_version = max(versions[x] for x in protocols)
    return context


def _pem_lines(text: str) -> str:
    """Inline PEM as Kafka's properties carry it (one line, or several)."""
    return text.replace("\\n", "\n").strip()
