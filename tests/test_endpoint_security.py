"""Security of the Kafka endpoint (deltalog.server.security, deltalog.server.sasl, deltalog.scram): TLS and SASL
(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) against real clients (kafka-python, confluent-kafka, kcat) and against raw
sockets that get the exchange wrong.

Certificates are made here with the ``cryptography`` package: a CA, the server's certificate for localhost and
127.0.0.1 (its key encrypted with ssl.key.password), and a client certificate. Quick tests run the endpoint in this
process; the `subprocess` ones start ``deltalog serve --config server.properties`` and kcat."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import signal
import socket
import ssl
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.net.sasl.scram import ScramClient
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from deltalog import scram
from deltalog.errors import InvalidConfigError, ProtocolError, ResourceNotFoundError, UnacceptableCredentialError
from deltalog.server import protocol, sasl
from deltalog.server.frames import read_frame
from deltalog.server.security import listener_security, load_properties
from deltalog.server.socket_server import SocketServer

REPO = Path(__file__).resolve().parents[1]
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
KEY_PASSWORD = "key-secret"


# -- certificates -----------------------------------------------------------------------------------------------

def _certificate(subject: str, key, issuer_name, issuer_key, *, ca: bool = False, sans=()):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer_name or name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    return builder.sign(issuer_key or key, hashes.SHA256()), name


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> dict[str, str]:
    """PEM files: ca.pem, server.pem (encrypted PKCS#8 key + chain: Kafka's PEM keystore), client.pem (key + cert),
    rogue.pem (a client certificate from another CA)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    d = tmp_path_factory.mktemp("certs")
    pem = serialization.Encoding.PEM
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca, ca_name = _certificate("deltalog test CA", ca_key, None, None, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server, _ = _certificate("localhost", server_key, ca_name, ca_key,
                             sans=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    (d / "ca.pem").write_bytes(ca.public_bytes(pem))
    (d / "server.pem").write_bytes(
        server_key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                 serialization.BestAvailableEncryption(KEY_PASSWORD.encode()))
        + server.public_bytes(pem) + ca.public_bytes(pem))
    for name, issuer_key, issuer_name in [("client", ca_key, ca_name), ("rogue", None, None)]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert, _ = _certificate(name, key, issuer_name, issuer_key)
        (d / f"{name}.pem").write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()) + cert.public_bytes(pem))
    return {p.stem: str(p) for p in d.iterdir()}


def sasl_ssl_props(certs, mechanisms="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", port=0, host="127.0.0.1", **more):
    return {"listeners": f"SASL_SSL://{host}:{port}", "ssl.keystore.type": "PEM",
            "ssl.keystore.location": certs["server"], "ssl.key.password": KEY_PASSWORD,
            "sasl.enabled.mechanisms": mechanisms, "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS, **more}


@pytest.fixture
def secure(store, certs):
    """A SASL_SSL endpoint with PLAIN users alice/admin and SCRAM user bob (both SCRAM mechanisms)."""
    creds = scram.ScramCredentials(store.storage)
    creds.upsert("bob", "SCRAM-SHA-256", "bob-secret", iterations=8192)
    creds.upsert("bob", "SCRAM-SHA-512", "bob-secret")
    store.create_topic("secure", 1)
    with SocketServer(store, "127.0.0.1", 0, security=listener_security(sasl_ssl_props(certs))) as server:
        yield server


CLIENTS = [("PLAIN", "alice", "alice-secret"), ("SCRAM-SHA-256", "bob", "bob-secret"),
           ("SCRAM-SHA-512", "bob", "bob-secret")]


# -- real clients over SASL_SSL -----------------------------------------------------------------------------

def test_kafka_python_produces_and_consumes_over_sasl_ssl_with_plain_and_scram(store, secure, certs):
    for mechanism, user, password in CLIENTS:
        conf = dict(bootstrap_servers=f"127.0.0.1:{secure.port}", security_protocol="SASL_SSL",
                    ssl_cafile=certs["ca"], sasl_mechanism=mechanism, sasl_plain_username=user,
                    sasl_plain_password=password)
        producer = KafkaProducer(enable_idempotence=False, **conf)
        producer.send("secure", key=b"k", value=f"kafka-python {mechanism}".encode()).get(timeout=20)
        producer.close()
        consumer = KafkaConsumer(auto_offset_reset="earliest", **conf)
        consumer.assign([TopicPartition("secure", 0)])
        got: list[bytes] = []
        for _ in range(20):
            got += [r.value for rs in consumer.poll(timeout_ms=500).values() for r in rs]
            if len(got) == 1 + [c[0] for c in CLIENTS].index(mechanism):
                break
        consumer.close()
        assert got[-1] == f"kafka-python {mechanism}".encode()
    assert [r.value for r in store.read("secure", 0)] == [f"kafka-python {m}".encode() for m, _, _ in CLIENTS]


def test_confluent_kafka_produces_and_consumes_over_sasl_ssl_with_plain_and_scram(store, secure, certs):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as TP

    for mechanism, user, password in CLIENTS:
        conf = {"bootstrap.servers": f"127.0.0.1:{secure.port}", "security.protocol": "SASL_SSL",
                "ssl.ca.location": certs["ca"], "sasl.mechanism": mechanism, "sasl.username": user,
                "sasl.password": password}
        producer = Producer(conf)
        producer.produce("secure", key=b"k", value=f"librdkafka {mechanism}".encode())
        assert producer.flush(20) == 0
        consumer = Consumer({**conf, "group.id": f"g-{mechanism}", "enable.auto.commit": False})
        consumer.assign([TP("secure", 0, 0)])
        values = []
        while len(values) < 1 + CLIENTS.index((mechanism, user, password)):
            msg = consumer.poll(10)
            assert msg is not None and msg.error() is None, msg and msg.error()
            values.append(msg.value())
        consumer.close()
        assert values[-1] == f"librdkafka {mechanism}".encode()


# -- what a failing client gets -----------------------------------------------------------------------------

def tls_connect(server: SocketServer, certs) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=certs["ca"])
    return context.wrap_socket(socket.create_connection(("127.0.0.1", server.port), timeout=10),
                               server_hostname="localhost")


def send(sock, request, correlation_id: int = 1) -> None:
    request.with_header(correlation_id=correlation_id, client_id="raw")
    sock.sendall(bytes(request.encode(header=True, framed=True)))


def receive(sock, cls, version: int):
    return cls[version].decode(read_frame(sock), version=version, header=True)



def closed(sock) -> bool:
    sock.settimeout(5)
    try:
        return sock.recv(1) == b""
    except (ConnectionError, ssl.SSLError):
        return True


def handshake(sock, mechanism: str, version: int = 1):
    send(sock, SaslHandshakeRequest[version](mechanism=mechanism))
    return receive(sock, SaslHandshakeResponse, version)


def authenticate(sock, token: bytes, version: int = 2, correlation_id: int = 2):
    send(sock, SaslAuthenticateRequest[version](auth_bytes=token), correlation_id)
    return receive(sock, SaslAuthenticateResponse, version)


def metadata_works(server: SocketServer, certs, user="alice", password="alice-secret") -> bool:
    with tls_connect(server, certs) as sock:
        assert handshake(sock, "PLAIN").error_code == 0
        assert authenticate(sock, f"\0{user}\0{password}".encode()).error_code == 0
        send(sock, MetadataRequest[1](topics=None), 3)
        return "secure" in [t.name for t in receive(sock, MetadataResponse, 1).topics]


def parse_server_first(answer) -> tuple[bytes, int]:
    """(salt, iterations) of a SCRAM server-first message."""
    fields = dict(f.split("=", 1) for f in bytes(answer.auth_bytes).decode().split(","))
    return base64.b64decode(fields["s"]), int(fields["i"])


def test_failed_authentication_gets_sasl_authentication_failed_then_nothing_and_others_are_served(secure, certs):
    good = tls_connect(secure, certs)  # authenticated first, and used after every failure
    assert handshake(good, "PLAIN").error_code == 0 and authenticate(good, b"\0admin\0admin-secret").error_code == 0

    def refused(mechanism: str, token: bytes) -> str:
        with tls_connect(secure, certs) as sock:
            assert handshake(sock, mechanism).error_code == 0
            answer = authenticate(sock, token)
            assert answer.error_code == protocol.SASL_AUTHENTICATION_FAILED == 58
            assert closed(sock)
            return answer.error_message

    assert "Invalid username or password" in refused("PLAIN", b"\0alice\0wrong")
    assert "Invalid username or password" in refused("PLAIN", b"\0mallory\0alice-secret")
    scram_answers = {}
    for user in ("bob", "mallory", "mallory"):  # a wrong password, an unknown user (twice): told apart by nothing
        with tls_connect(secure, certs) as sock:
            client = ScramClient(user, "wrong", "SCRAM-SHA-512")
            assert handshake(sock, "SCRAM-SHA-512").error_code == 0
            first = authenticate(sock, client.first_message())
            assert first.error_code == 0
            client.process_server_first_message(first.auth_bytes)
            salt, iterations = parse_server_first(first)
            answer = authenticate(sock, client.final_message(), correlation_id=3)
            assert answer.error_code == 58 and closed(sock)
            scram_answers.setdefault(user, []).append((answer.error_message, len(salt), iterations))
    assert scram_answers["bob"][0] == scram_answers["mallory"][0] == scram_answers["mallory"][1]
    assert scram_answers["bob"][0][0] == ("Authentication failed during authentication due to invalid credentials "
                                          "with SASL mechanism SCRAM-SHA-512")
    with tls_connect(secure, certs) as sock:  # a mechanism the listener does not enable
        answer = handshake(sock, "GSSAPI")
        assert answer.error_code == protocol.UNSUPPORTED_SASL_MECHANISM
        assert answer.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] and closed(sock)
    with tls_connect(secure, certs) as sock:  # no API but ApiVersions and SaslHandshake before authentication
        send(sock, ApiVersionsRequest[3](client_software_name="raw", client_software_version="1"))
        assert receive(sock, ApiVersionsResponse, 3).error_code == 0
        send(sock, MetadataRequest[1](topics=None), 2)
        assert closed(sock)
    with socket.create_connection(("127.0.0.1", secure.port), timeout=10) as plain:  # plaintext on a TLS port
        send(plain, ApiVersionsRequest[0]())
        assert closed(plain)
    send(good, MetadataRequest[1](topics=None), 5)
    assert [t.name for t in receive(good, MetadataResponse, 1).topics] == ["secure"]
    good.close()
    assert metadata_works(secure, certs)


def test_sasl_handshake_v0_sends_raw_tokens_and_a_failure_just_closes(secure, certs):
    """KIP-152's older framing: after SaslHandshake v0 the tokens are size-prefixed frames without a header."""
    with tls_connect(secure, certs) as sock:
        assert handshake(sock, "SCRAM-SHA-256", version=0).error_code == 0
        client = ScramClient("bob", "bob-secret", "SCRAM-SHA-256")
        for step in (client.first_message, client.final_message):
            token = step()  # once: the client keeps what it sent for its proof
            sock.sendall(struct.pack(">i", len(token)) + token)
            answer = read_frame(sock)
            if step == client.first_message:
                client.process_server_first_message(answer)
        client.process_server_final_message(answer)  # raises when the server signature is wrong
        send(sock, MetadataRequest[1](topics=None), 9)
        assert [t.name for t in receive(sock, MetadataResponse, 1).topics] == ["secure"]
        send(sock, SaslHandshakeRequest[1](mechanism="PLAIN"), 10)  # once authenticated: ILLEGAL_SASL_STATE
        assert receive(sock, SaslHandshakeResponse, 1).error_code == protocol.ILLEGAL_SASL_STATE
    with tls_connect(secure, certs) as sock:
        assert handshake(sock, "PLAIN", version=0).error_code == 0
        sock.sendall(struct.pack(">i", 13) + b"\0alice\0wrong!")
        assert closed(sock)


def test_scram_server_matches_rfc_7677_test_vector():
    """RFC 7677 section 3: user "user", password "pencil"; the client's proof is accepted and the server signature
    is the RFC's, byte for byte."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = scram.make_credential("SCRAM-SHA-256", "pencil", iterations=4096, salt=salt)
    server = sasl.ScramServer("SCRAM-SHA-256", lambda user, m: credential if user == "user" else None,
                              server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    assert server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    final = server.evaluate(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                            b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=" and server.principal == "user"


def test_scram_credentials_are_kept_without_the_password_and_managed_like_kafka(store):
    admin = store.admin()
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    from kafka.admin import UserScramCredentialUpsertion as KafkaPythonUpsertion

    done = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"c-secret"),
        KafkaPythonUpsertion("dave", "SCRAM-SHA-512", "d-secret", iterations=5000)])
    assert {u: f.result() for u, f in done.items()} == {"carol": None, "dave": None}
    described = admin.describe_user_scram_credentials().result()
    assert {u: [(i.mechanism, i.iterations) for i in d.scram_credential_infos] for u, d in described.items()} == {
        "carol": [("SCRAM-SHA-256", 8192)], "dave": [("SCRAM-SHA-512", 5000)]}
    raw = b"".join(p.read_bytes() for p in (Path(store.root) / "_deltalog" / "users").iterdir())
    assert b"c-secret" not in raw and b"d-secret" not in raw and b"stored_key" in raw
    creds = scram.ScramCredentials(store.storage)
    dave = creds.get("dave", "SCRAM-SHA-512")  # kafka-python salted the password itself: same keys
    assert dave == scram.make_credential("SCRAM-SHA-512", "d-secret", iterations=5000, salt=dave.salt)
    with pytest.raises(UnacceptableCredentialError, match="4096..16384"):
        creds.upsert("erin", "SCRAM-SHA-256", "x", iterations=100)
    with pytest.raises(ResourceNotFoundError):
        creds.delete("carol", "SCRAM-SHA-512")
    creds.delete("carol", "SCRAM-SHA-256")
    assert creds.get("carol", "SCRAM-SHA-256") is None and list(creds.describe()) == ["dave"]
    from confluent_kafka.admin import UserScramCredentialDeletion

    gone = admin.alter_user_scram_credentials([UserScramCredentialDeletion("dave", ScramMechanism.SCRAM_SHA_512)])
    assert gone["dave"].result() is None and admin.describe_user_scram_credentials().result() == {}
    with pytest.raises(ResourceNotFoundError):
        admin.describe_user_scram_credentials(["dave"])["dave"].result()


def test_admin_clients_alter_and_describe_scram_credentials_through_the_endpoint(store, secure, certs):
    """KIP-554's APIs, as kafka-configs --bootstrap-server and both admin clients send them: the new user then logs
    in with SCRAM on a fresh connection."""
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    from kafka import KafkaAdminClient

    conf = {"bootstrap.servers": f"127.0.0.1:{secure.port}", "security.protocol": "SASL_SSL",
            "ssl.ca.location": certs["ca"], "sasl.mechanism": "PLAIN", "sasl.username": "admin",
            "sasl.password": "admin-secret"}
    admin = AdminClient(conf)
    altered = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("frank", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"f-secret"),
        UserScramCredentialUpsertion("gina", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 100), b"g-secret")])
    assert altered["frank"].result(10) is None
    with pytest.raises(Exception, match="4096..16384"):
        altered["gina"].result(10)
    described = admin.describe_user_scram_credentials(["frank", "gina"])
    assert [(i.mechanism, i.iterations) for i in described["frank"].result(10).scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 8192)]
    with pytest.raises(Exception, match="does not exist"):
        described["gina"].result(10)
    kp = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{secure.port}", security_protocol="SASL_SSL",
                          ssl_cafile=certs["ca"], sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="frank",
                          sasl_plain_password="f-secret")
    everyone = kp.describe_user_scram_credentials()
    kp.close()
    assert sorted(everyone) == ["bob", "frank"]
    assert scram.ScramCredentials(store.storage).get("frank", "SCRAM-SHA-256").iterations == 8192


# -- configuration ------------------------------------------------------------------------------------------

def test_plaintext_refuses_a_non_loopback_bind_and_security_allows_it(store, certs):
    with pytest.raises(InvalidConfigError, match="loopback.*ssl.keystore.location.*sasl.enabled.mechanisms"):
        SocketServer(store, "0.0.0.0", 0)
    security = listener_security(sasl_ssl_props(certs, host="0.0.0.0", **{
        "advertised.listeners": "SASL_SSL://localhost:9093"}))
    with SocketServer(store, "0.0.0.0", 0, security=security) as server:
        assert server.port > 0 and security.describe() == (
            "SASL_SSL, TLS, ssl.client.auth=none, SASL PLAIN, SCRAM-SHA-256, SCRAM-SHA-512")


def test_plaintext_accepts_a_host_name_that_resolves_to_loopback_only(store):
    from deltalog.server.security import is_loopback

    assert is_loopback("127.0.0.2") and not is_loopback("example.invalid") and not is_loopback("192.0.2.1")
    name = socket.gethostname()  # on these machines /etc/hosts maps it to 127.0.0.1
    addresses = {a[4][0] for a in socket.getaddrinfo(name, None)}
    if not all(a.startswith("127.") or a == "::1" for a in addresses):
        pytest.skip(f"{name} resolves to {addresses}: not loopback here")
    assert is_loopback(name)
    with SocketServer(store, name, 0) as server:
        assert server.port > 0


def test_properties_files_follow_javas_rules(tmp_path):
    """java.util.Properties.load's rules (jproperties): separators, comments, escapes, continuation lines, the last
    of a key given twice."""
    path = tmp_path / "server.properties"
    path.write_text("! a comment\n# another\nlisteners:PLAINTEXT://127.0.0.1:9092\nkey\\ with\\ spaces value here\n"
                    "unicode=caf\\u00e9\ntab=a\\tb\nlist = a,\\\n    b,\\\n    c\nbare\nbackslash=ends\\\\\n"
                    "dup=1\ndup=2\n", encoding="utf-8")
    assert load_properties(str(path)) == {
        "listeners": "PLAINTEXT://127.0.0.1:9092", "key with spaces": "value here", "unicode": "café", "tab": "a\tb",
        "list": "a,b,c", "bare": "", "backslash": "ends\\", "dup": "2"}
    with pytest.raises(InvalidConfigError, match="cannot read the config file"):
        load_properties(str(tmp_path / "missing.properties"))


def test_broker_configs_are_read_like_kafka_and_bad_ones_are_named(tmp_path, certs):
    path = tmp_path / "server.properties"
    path.write_text("# Kafka's file\nlisteners = SASL_SSL://127.0.0.1:9093\nlog.dirs=/tmp/kafka-logs\n"
                    f"ssl.keystore.type=PEM\nssl.keystore.location={certs['server']}\nssl.key.password={KEY_PASSWORD}\n"
                    "sasl.enabled.mechanisms=PLAIN\nlistener.name.sasl_ssl.plain.sasl.jaas.config=\\\n"
                    "  org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
                    '  user_alice="alice-secret";\n')
    props = load_properties(str(path))
    sec = listener_security(props)
    assert (sec.name, sec.protocol, sec.port, sec.mechanisms, sec.plain_users) == (
        "SASL_SSL", "SASL_SSL", 9093, ("PLAIN",), {"alice": "alice-secret"})
    assert sec.unused == ["log.dirs"]

    def refused(match: str, **changes) -> None:
        with pytest.raises(InvalidConfigError, match=match):
            listener_security({**props, **changes})

    refused("sasl.enabled.mechanisms is not set", **{"sasl.enabled.mechanisms": ""})
    refused("GSSAPI is not served", **{"sasl.enabled.mechanisms": "PLAIN,GSSAPI"})
    refused("JKS", **{"ssl.keystore.type": "JKS"})
    refused("needs a keystore", **{"ssl.keystore.location": ""})
    refused("cannot be loaded", **{"ssl.key.password": "wrong"})
    refused("one listener per process", listeners="SASL_SSL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092")
    refused("advertised.listeners", listeners="SASL_SSL://0.0.0.0:9093")
    refused("needs a truststore", **{"ssl.client.auth": "required"})
    refused("no PLAIN user", **{"listener.name.sasl_ssl.plain.sasl.jaas.config": ""})


def test_plain_users_from_a_jaas_file_and_a_users_file(tmp_path):
    jaas = tmp_path / "kafka_server_jaas.conf"
    jaas.write_text('// Kafka\'s JAAS file\nsasl_plaintext.KafkaServer {\n'
                    '  org.apache.kafka.common.security.plain.PlainLoginModule required\n'
                    '    username="admin" password="admin-secret"\n    user_admin="admin-secret" user_x="a \\"quoted\\" one";\n};\n')
    users = tmp_path / "users.properties"
    users.write_text("# deltalog's shorthand\nalice=alice-secret\n")
    props = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN"}
    sec = listener_security(props, jaas_file=str(jaas), plain_users_file=str(users))
    assert sec.plain_users == {"admin": "admin-secret", "x": 'a "quoted" one', "alice": "alice-secret"}
    assert sec.describe() == "SASL_PLAINTEXT, SASL PLAIN"
    jaas.write_text("KafkaServer { com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true; };")
    with pytest.raises(InvalidConfigError, match="Krb5LoginModule is not served"):
        listener_security(props, jaas_file=str(jaas))


def test_ssl_client_auth_required_accepts_the_ca_s_clients_only(store, certs):
    store.create_topic("secure", 1)
    security = listener_security({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": certs["server"],
                                  "ssl.key.password": KEY_PASSWORD, "ssl.truststore.type": "PEM",
                                  "ssl.truststore.location": certs["ca"], "ssl.client.auth": "required"})
    with SocketServer(store, "127.0.0.1", 0, security=security) as server:
        for who, served in [("client", True), ("rogue", False)]:
            context = ssl.create_default_context(cafile=certs["ca"])
            context.load_cert_chain(certs[who])
            try:
                with context.wrap_socket(socket.create_connection(("127.0.0.1", server.port), timeout=10),
                                         server_hostname="localhost") as sock:
                    send(sock, MetadataRequest[1](topics=None))
                    got = [t.name for t in receive(sock, MetadataResponse, 1).topics]
            except (ssl.SSLError, ConnectionError, ProtocolError):  # refused in the handshake, or closed after it
                got = None
            assert (got == ["secure"]) is served, (who, got)


def test_request_metrics_count_sasl_requests_and_unsupported_versions_by_api_key(store, certs):
    """Kafka's RequestMetrics count every request by API key: the SASL exchange of a real client (kafka-python, SCRAM)
    and an ApiVersions at a version not served (answered UNSUPPORTED_VERSION), on a SASL listener before
    authentication and on a PLAINTEXT one, as well as the Produce that follows."""
    from deltalog.server.request_metrics import RequestMetrics

    creds = scram.ScramCredentials(store.storage)
    creds.upsert("bob", "SCRAM-SHA-256", "bob-secret", iterations=8192)
    store.create_topic("secure", 1)
    too_new = struct.pack(">hhih", 18, 99, 7, 3) + b"raw"  # ApiVersions v99: only its fixed header is read
    metrics = RequestMetrics()
    with SocketServer(store, "127.0.0.1", 0, security=listener_security(sasl_ssl_props(certs)),
                      metrics=metrics) as server:
        producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{server.port}", security_protocol="SASL_SSL",
                                 ssl_cafile=certs["ca"], sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="bob",
                                 sasl_plain_password="bob-secret", enable_idempotence=False)
        producer.send("secure", key=b"k", value=b"v").get(timeout=20)
        producer.close()
        with tls_connect(server, certs) as sock:
            sock.sendall(struct.pack(">i", len(too_new)) + too_new)
            assert ApiVersionsResponse[0].decode(read_frame(sock), version=0, header=True).error_code == 35
    counted = metrics.snapshot()
    requests = {name: sum(n for (k, _v), n in counted["requests"].items() if k == name)
                for name, _v in counted["requests"]}
    assert requests["SaslHandshake"] >= 1 and requests["SaslAuthenticate"] >= 2  # SCRAM: client-first, client-final
    assert requests["Produce"] >= 1 and counted["requests"][("ApiVersions", 99)] == 1
    too_new_versions = sum(n for (k, v), n in counted["requests"].items() if k == "ApiVersions" and v > 3)
    assert counted["errors"][("ApiVersions", "UNSUPPORTED_VERSION")] == too_new_versions  # v99, kafka-python's probe
    assert counted["errors"][("SaslAuthenticate", "NONE")] == requests["SaslAuthenticate"]

    plain = RequestMetrics()
    with SocketServer(store, "127.0.0.1", 0, metrics=plain) as server, \
            socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(too_new)) + too_new)
        assert ApiVersionsResponse[0].decode(read_frame(sock), version=0, header=True).error_code == 35
    assert plain.snapshot()["requests"] == {("ApiVersions", 99): 1}
    assert plain.snapshot()["errors"] == {("ApiVersions", "UNSUPPORTED_VERSION"): 1}


# -- deltalog serve --config, kcat ------------------------------------------------------------------------

def kcat_conf(port: int, certs, mechanism: str, user: str, password: str) -> list[str]:
    return ["-b", f"localhost:{port}", "-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={certs['ca']}",
            "-X", f"sasl.mechanism={mechanism}", "-X", f"sasl.username={user}", "-X", f"sasl.password={password}"]


@pytest.mark.subprocess
def test_deltalog_serve_config_file_with_kcat_over_sasl_ssl(tmp_path, certs):
    from tooling.services import ensure_kcat, free_port

    kcat = ensure_kcat()
    assert "sasl_scram" in subprocess.run([kcat, "-V"], capture_output=True, text=True).stdout
    store, port = tmp_path / "store", free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cli = [sys.executable, "-m", "deltalog"]
    subprocess.run([*cli, "topics", "create", "changes", "--partitions", "1", "--store", str(store)], check=True,
                   env=env, capture_output=True)
    added = subprocess.run([*cli, "configs", "--alter", "--entity-type", "users", "--entity-name", "bob",
                            "--add-config", "SCRAM-SHA-512=[iterations=8192,password=bob-secret]", "--store",
                            str(store)], env=env, capture_output=True, text=True, check=True)
    assert added.stdout.strip() == "Completed updating config for user bob."
    config = tmp_path / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in sasl_ssl_props(
        certs, port=port, host="0.0.0.0", mechanisms="PLAIN,SCRAM-SHA-512",
        **{"advertised.listeners": f"SASL_SSL://localhost:{port}"}).items()))
    server = subprocess.Popen([*cli, "serve", "--config", str(config), "--store", str(store)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        health = server.stdout.readline()
        assert f"listening on 0.0.0.0:{port} (SASL_SSL, TLS, ssl.client.auth=none, SASL PLAIN, SCRAM-SHA-512)" in health
        plain = kcat_conf(port, certs, "PLAIN", "alice", "alice-secret")
        subprocess.run([kcat, *plain, "-P", "-t", "changes", "-K:"], input="k1:from-plain\n", text=True, timeout=60,
                       check=True)
        scram512 = kcat_conf(port, certs, "SCRAM-SHA-512", "bob", "bob-secret")
        subprocess.run([kcat, *scram512, "-P", "-t", "changes", "-K:"], input="k2:from-scram\n", text=True,
                       timeout=60, check=True)
        out = subprocess.run([kcat, *scram512, "-C", "-t", "changes", "-o", "beginning", "-e", "-f", "%k=%s\n"],
                             capture_output=True, text=True, timeout=60, check=True).stdout
        assert out.splitlines() == ["k1=from-plain", "k2=from-scram"]
        wrong = subprocess.run([kcat, *kcat_conf(port, certs, "SCRAM-SHA-512", "bob", "nope"), "-L", "-m", "10"],
                               capture_output=True, text=True, timeout=60)
        assert wrong.returncode != 0 and "Authentication failed" in wrong.stderr + wrong.stdout
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0
        assert "authentication failed" in server.stderr.read().lower()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


@pytest.mark.subprocess
def test_deltalog_serve_refuses_plaintext_on_every_address_naming_the_configs(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "deltalog", "serve", "--store", str(tmp_path / "s"), "--override",
                           "listeners=PLAINTEXT://0.0.0.0:9092", "--override", "advertised.listeners=PLAINTEXT://h:1"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2
    assert "loopback" in done.stderr and "listeners=SASL_SSL://" in done.stderr and "ssl.keystore.location" in done.stderr
    started = subprocess.Popen([sys.executable, "-m", "deltalog", "serve", "--store", str(tmp_path / "s"), "--listen",
                                "127.0.0.1:0", "--output", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env)
    try:
        health = json.loads(started.stdout.readline())
        assert health["security_protocol"] == "PLAINTEXT" and "loopback only" in health["security"]
        assert health["sasl_mechanisms"] == []
    finally:
        started.send_signal(signal.SIGTERM)
        started.wait(timeout=30)


def test_a_damaged_credential_document_fails_that_user_only_and_the_doctor_names_it(store, secure, certs):
    from deltalog import state_check

    creds = scram.ScramCredentials(store.storage)
    creds.upsert("carol", "SCRAM-SHA-256", "c-secret")
    Path(creds._location("carol")).write_text('{"user": "carol", "scram": {"SCRAM-SHA-256": {"salt": "%%"}}}')
    with tls_connect(secure, certs) as sock:  # refused at the proof, as an unknown user is
        client = ScramClient("carol", "c-secret", "SCRAM-SHA-256")
        assert handshake(sock, "SCRAM-SHA-256").error_code == 0
        client.process_server_first_message(authenticate(sock, client.first_message()).auth_bytes)
        answer = authenticate(sock, client.final_message(), correlation_id=3)
        assert answer.error_code == 58 and closed(sock)
    with tls_connect(secure, certs) as sock:  # bob still logs in
        client = ScramClient("bob", "bob-secret", "SCRAM-SHA-256")
        assert handshake(sock, "SCRAM-SHA-256").error_code == 0
        client.process_server_first_message(authenticate(sock, client.first_message()).auth_bytes)
        final = authenticate(sock, client.final_message(), correlation_id=3)
        assert final.error_code == 0
        client.process_server_final_message(final.auth_bytes)
    _, problems = state_check.scan_state(store.storage)
    assert [p.detail.split(":")[0] for p in problems] == [creds._location("carol")]
    assert "deltalog configs --alter --entity-type users" in problems[0].fix
