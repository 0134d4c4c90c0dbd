"""Kafka's authorization on ``deltalog serve`` (deltalog.acls, deltalog.server.authorization, deltalog.server.acl_apis):
the StandardAuthorizer's decisions on bindings, the ACLs kept in the store, and real clients (kafka-python's and
confluent-kafka's admin clients, producers and consumers) over SASL_PLAINTEXT on loopback: a super user grants a team
user its topics and group; the user reaches those and is refused elsewhere with Kafka's error codes."""

from __future__ import annotations

import pytest

from deltalog import acls
from deltalog.acls import AclBinding, AclFilter, AclOperation, AclPermissionType, AclStore, PatternType, ResourceType
from deltalog.errors import InvalidAclError, InvalidConfigError
from deltalog.server.broker_config import BrokerConfig
from deltalog.server.security import listener_security
from deltalog.server.socket_server import SocketServer
from deltalog.structs import OffsetAndMetadata
from deltalog.structs import TopicPartition as TopicPartitionD
from tooling.services import stop_process

OP, RT, PT, PERM = AclOperation, ResourceType, PatternType, AclPermissionType
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";')
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def binding(rt, name, op, principal="User:alice", *, pattern=PT.LITERAL, host="*", perm=PERM.ALLOW):
    return AclBinding(rt, name, pattern, principal, host, op, perm)


# -- the model ----------------------------------------------------------------------------------------------------

def test_standard_authorizer_decisions():
    b = [binding(RT.TOPIC, "team-", OP.WRITE, pattern=PT.PREFIXED),
         binding(RT.TOPIC, "team-secret", OP.ALL, principal="User:*", perm=PERM.DENY),
         binding(RT.TOPIC, "*", OP.READ, principal="User:bob", host="10.0.0.1"),
         binding(RT.TOPIC, "conf", OP.ALTER_CONFIGS),
         binding(RT.GROUP, "g", OP.READ)]

    def ok(principal, op, rt, name, host="127.0.0.1", **kw):
        return acls.authorize(b, principal, host, op, rt, name, **kw)

    assert ok("User:alice", OP.WRITE, RT.TOPIC, "team-a")
    assert ok("User:alice", OP.DESCRIBE, RT.TOPIC, "team-a")  # WRITE implies DESCRIBE
    assert not ok("User:alice", OP.READ, RT.TOPIC, "team-a")
    assert not ok("User:alice", OP.WRITE, RT.TOPIC, "team-secret")  # DENY wins
    assert not ok("User:alice", OP.WRITE, RT.TOPIC, "other")
    assert ok("User:bob", OP.READ, RT.TOPIC, "anything", host="10.0.0.1")
    assert not ok("User:bob", OP.READ, RT.TOPIC, "anything", host="10.0.0.2")
    assert ok("User:alice", OP.DESCRIBE_CONFIGS, RT.TOPIC, "conf")  # ALTER_CONFIGS implies DESCRIBE_CONFIGS
    assert not ok("User:alice", OP.ALTER, RT.TOPIC, "conf")
    assert ok("User:alice", OP.DESCRIBE, RT.GROUP, "g") and not ok("User:alice", OP.DELETE, RT.GROUP, "g")
    # no binding matches the cluster: allow.everyone.if.no.acl.found decides; super users pass everything
    assert not ok("User:alice", OP.ALTER, RT.CLUSTER, "kafka-cluster")
    assert ok("User:alice", OP.ALTER, RT.CLUSTER, "kafka-cluster", allow_if_no_acl=True)
    assert not ok("User:alice", OP.READ, RT.GROUP, "g2", allow_if_no_acl=False)
    assert ok("User:root", OP.WRITE, RT.TOPIC, "team-secret", super_users=frozenset({"User:root"}))
    # a binding on the resource exists (bob's wildcard READ): allow.everyone.if.no.acl.found no longer applies
    assert not ok("User:carol", OP.READ, RT.TOPIC, "x", allow_if_no_acl=True)


def test_acls_are_a_document_of_the_store_changed_by_filters(store):
    a = AclStore(store.storage)
    a.create([binding(RT.TOPIC, "t", OP.READ), binding(RT.TOPIC, "t", OP.READ),
              binding(RT.GROUP, "g-", OP.READ, pattern=PT.PREFIXED)])
    assert len(a.bindings()) == 2  # one binding created twice is kept once, as Kafka
    assert a.describe(AclFilter(RT.GROUP, "g-1", PT.MATCH)) == [binding(RT.GROUP, "g-", OP.READ, pattern=PT.PREFIXED)]
    assert a.describe(AclFilter(RT.GROUP, "g-1", PT.LITERAL)) == []
    assert a.delete([AclFilter(RT.TOPIC)]) == [[binding(RT.TOPIC, "t", OP.READ)]]
    assert [b.resource_type for b in AclStore(store.storage).bindings()] == [RT.GROUP]
    for bad in (binding(RT.ANY, "t", OP.READ), binding(RT.TOPIC, "t", OP.ANY), binding(RT.TOPIC, "t", OP.READ,
                                                                                         principal="alice"),
                binding(RT.TOPIC, "t", OP.READ, host="example.com"), binding(RT.CLUSTER, "c", OP.ALTER)):
        with pytest.raises(InvalidAclError):
            a.create([bad])
    with pytest.raises(InvalidConfigError, match="authorizer.class.name"):
        acls.Authorizer.from_properties(store.storage, {"authorizer.class.name": "com.example.Mine"})
    with pytest.raises(InvalidConfigError, match="super.users"):
        acls.Authorizer.from_properties(store.storage, {"authorizer.class.name": AUTHORIZER, "super.users": "root"})
    assert acls.Authorizer.from_properties(store.storage, {}) is None
    with pytest.raises(InvalidConfigError, match="allow.everyone.if.no.acl.found"):  # deltalog serve: before it listens
        BrokerConfig.from_properties({"authorizer.class.name": AUTHORIZER, "allow.everyone.if.no.acl.found": "yes"})
    legacy = acls.Authorizer.from_properties(store.storage, {"authorizer.class.name":
                                                             "kafka.security.authorizer.AclAuthorizer"})
    assert legacy is not None and not legacy.allow_if_no_acl


# -- real clients -------------------------------------------------------------------------------------------------

@pytest.fixture
def secured(store):
    """A SASL_PLAINTEXT endpoint with the StandardAuthorizer, super user admin, and PLAIN users alice and bob."""
    for t in ("alice-orders", "bob-orders"):
        store.create_topic(t, 1)
    props = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
             "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
             "authorizer.class.name": AUTHORIZER, "super.users": "User:admin"}
    with SocketServer(store, "127.0.0.1", 0, security=listener_security(props),
                      config=BrokerConfig.from_properties(props)) as server:
        yield server


def kp_conf(server, user):
    return dict(bootstrap_servers=f"127.0.0.1:{server.port}", security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="PLAIN", sasl_plain_username=user, sasl_plain_password=f"{user}-secret")


def test_a_team_user_reaches_only_its_topics_and_group(store, secured):
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import ACL, ACLFilter, ACLOperation, ACLPermissionType, ResourcePattern, ResourcePatternFilter
    from kafka.admin import ACLResourcePatternType as KPT
    from kafka.admin import ResourceType as KRT
    from kafka.errors import (
        ClusterAuthorizationFailedError,
        GroupAuthorizationFailedError,
        TopicAuthorizationFailedError,
    )

    admin = KafkaAdminClient(**kp_conf(secured, "admin"))
    result = admin.create_acls([
        ACL("User:alice", "*", op, ACLPermissionType.ALLOW, ResourcePattern(KRT.TOPIC, "alice-", KPT.PREFIXED))
        for op in (ACLOperation.READ, ACLOperation.WRITE)] + [
        ACL("User:alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
            ResourcePattern(KRT.GROUP, "alice-group", KPT.LITERAL))])
    assert not result["failed"] and len(result["succeeded"]) == 3
    found, error = admin.describe_acls(ACLFilter("User:alice", None, ACLOperation.ANY, ACLPermissionType.ANY,
                                                 ResourcePatternFilter(KRT.ANY, None, KPT.ANY)))
    assert sorted((a.resource_pattern.resource_type, a.resource_pattern.resource_name, a.operation) for a in found) == [
        (KRT.TOPIC, "alice-", ACLOperation.READ), (KRT.TOPIC, "alice-", ACLOperation.WRITE),
        (KRT.GROUP, "alice-group", ACLOperation.READ)]

    producer = KafkaProducer(**kp_conf(secured, "alice"))  # idempotent: WRITE on a topic is enough (KIP-679)
    producer.send("alice-orders", b"mine").get(timeout=20)
    with pytest.raises(TopicAuthorizationFailedError):
        producer.send("bob-orders", b"not mine").get(timeout=20)
    producer.close()
    assert [r.value for r in store.read("alice-orders", 0)] == [b"mine"]
    assert store.read("bob-orders", 0) == []

    consumer = KafkaConsumer("alice-orders", group_id="alice-group", auto_offset_reset="earliest",
                             consumer_timeout_ms=10_000, **kp_conf(secured, "alice"))
    got = next(iter(consumer)).value
    consumer.commit()
    consumer.close()
    assert got == b"mine"
    assert [o.offset for o in store.offsets_topic.committed("alice-group").values()] == [1]

    # a topic it may see (DESCRIBE) but not read: the Fetch is refused
    AclStore(store.storage).create([binding(RT.TOPIC, "bob-orders", OP.DESCRIBE)])
    secured.apis.authz.authorizer.invalidate()
    reader = KafkaConsumer(auto_offset_reset="earliest", **kp_conf(secured, "alice"))
    reader.assign([TopicPartition("bob-orders", 0)])
    with pytest.raises(TopicAuthorizationFailedError):
        reader.poll(timeout_ms=5000)
    reader.close()

    thief = KafkaConsumer("alice-orders", group_id="bob-group", auto_offset_reset="earliest",
                          consumer_timeout_ms=5_000, **kp_conf(secured, "alice"))
    with pytest.raises(GroupAuthorizationFailedError):
        next(iter(thief))
    thief.close()

    alice_admin = KafkaAdminClient(**kp_conf(secured, "alice"))
    with pytest.raises(ClusterAuthorizationFailedError):
        alice_admin.describe_acls(ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                            ResourcePatternFilter(KRT.ANY, None, KPT.ANY)))
    refused = alice_admin.create_acls([ACL("User:alice", "*", ACLOperation.ALL, ACLPermissionType.ALLOW,
                                           ResourcePattern(KRT.CLUSTER, "kafka-cluster", KPT.LITERAL))])
    assert len(refused["failed"]) == 1
    with pytest.raises(TopicAuthorizationFailedError):
        alice_admin.delete_topics(["bob-orders"])
    alice_admin.close()
    assert store.topic_exists("bob-orders")
    # bob has no ACL at all: nothing, not even the topic list
    bob = KafkaAdminClient(**kp_conf(secured, "bob"))
    assert "alice-orders" not in bob.list_topics()
    bob.close()

    # the grant removed: alice is refused at once on this endpoint (it re-reads after a change it made)
    admin.delete_acls([ACLFilter("User:alice", None, ACLOperation.ANY, ACLPermissionType.ANY,
                                 ResourcePatternFilter(KRT.TOPIC, "alice-", KPT.PREFIXED))])
    admin.close()
    producer = KafkaProducer(enable_idempotence=False, **kp_conf(secured, "alice"))
    with pytest.raises(TopicAuthorizationFailedError):
        producer.send("alice-orders", b"no longer").get(timeout=20)
    producer.close()


def test_confluent_kafka_admin_and_scram_users_need_the_cluster(store, secured):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AclBinding as CBinding,
    )
    from confluent_kafka.admin import (
        AclBindingFilter,
        AdminClient,
        ResourcePatternType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )
    from confluent_kafka.admin import (
        AclOperation as COp,
    )
    from confluent_kafka.admin import (
        AclPermissionType as CPerm,
    )
    from confluent_kafka.admin import (
        ResourceType as CRT,
    )

    def conf(user):
        return {"bootstrap.servers": f"127.0.0.1:{secured.port}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": f"{user}-secret"}

    admin = AdminClient(conf("admin"))
    b = CBinding(CRT.TOPIC, "bob-orders", ResourcePatternType.LITERAL, "User:bob", "*", COp.READ, CPerm.ALLOW)
    admin.create_acls([b])[b].result(10)
    listed = admin.describe_acls(AclBindingFilter(CRT.ANY, None, ResourcePatternType.ANY, None, None, COp.ANY,
                                                  CPerm.ANY)).result(10)
    assert [(x.name, x.principal, x.operation) for x in listed] == [("bob-orders", "User:bob", COp.READ)]

    alice = AdminClient(conf("alice"))
    upsert = UserScramCredentialUpsertion("mallory", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"pw")
    with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED|not authorized"):
        alice.alter_user_scram_credentials([upsert])["mallory"].result(10)
    with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED|not authorized"):
        alice.create_acls([b])[b].result(10)
    assert admin.alter_user_scram_credentials([upsert])["mallory"].result(10) is None  # the super user may

    f = AclBindingFilter(CRT.TOPIC, None, ResourcePatternType.ANY, "User:bob", None, COp.ANY, CPerm.ANY)
    assert [x.name for x in admin.delete_acls([f])[f].result(10)] == ["bob-orders"]
    assert AclStore(store.storage).bindings() == []


def test_plaintext_endpoint_on_the_same_store_is_anonymous_and_refused(store):
    """The loopback PLAINTEXT door issue 36 found: with the authorizer on, its clients are User:ANONYMOUS and get
    nothing the ACLs do not give that principal; ACLs made through another endpoint bind it too."""
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePatternFilter,
        ResourceType,
    )
    from kafka.errors import ClusterAuthorizationFailedError, TopicAuthorizationFailedError

    store.create_topic("open", 1)
    props = {"authorizer.class.name": AUTHORIZER}
    with SocketServer(store, "127.0.0.1", 0, config=BrokerConfig.from_properties(props)) as server:
        boot = f"127.0.0.1:{server.port}"
        producer = KafkaProducer(bootstrap_servers=boot, enable_idempotence=False)
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("open", b"x").get(timeout=20)
        AclStore(store.storage).create([binding(RT.TOPIC, "open", OP.WRITE, principal=acls.ANONYMOUS)])
        server.apis.authz.authorizer.invalidate()  # another endpoint's change: seen within acls.REFRESH_S
        producer.send("open", b"y").get(timeout=20)
        producer.close()
        admin = KafkaAdminClient(bootstrap_servers=boot)
        with pytest.raises(TopicAuthorizationFailedError):
            admin.delete_topics(["open"])
        with pytest.raises(ClusterAuthorizationFailedError):
            admin.describe_acls(ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                          ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY)))
        admin.close()
    assert [r.value for r in store.read("open", 0)] == [b"y"]


def test_transactional_id_needs_write_on_it(store, secured):
    from kafka import KafkaProducer
    from kafka.errors import TransactionalIdAuthorizationFailedError

    acl_store = AclStore(store.storage)
    acl_store.create([binding(RT.TOPIC, "alice-", OP.WRITE, pattern=PT.PREFIXED)])
    producer = KafkaProducer(transactional_id="alice-tx", **kp_conf(secured, "alice"))
    with pytest.raises(TransactionalIdAuthorizationFailedError):
        producer.init_transactions()
    producer.close()
    acl_store.create([binding(RT.TRANSACTIONAL_ID, "alice-tx", OP.WRITE)])
    secured.apis.authz.authorizer.invalidate()
    producer = KafkaProducer(transactional_id="alice-tx", **kp_conf(secured, "alice"))
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("alice-orders", b"in a transaction")
    producer.commit_transaction()
    producer.close()
    assert [r.value for r in store.read("alice-orders", 0)] == [b"in a transaction"]


def test_deltalog_acls_command_adds_lists_and_removes_like_kafka_acls(store, capsys):
    from deltalog.cli import main

    root = ["--store", str(store.root)]
    assert main([*root, "acls", "--add", "--allow-principal", "User:alice", "--operation", "Read", "--operation",
                 "Write", "--topic", "orders-", "--resource-pattern-type", "prefixed"]) == 0
    assert main([*root, "acls", "--add", "--deny-principal", "User:bob", "--deny-host", "10.0.0.9", "--group",
                 "app", "--cluster"]) == 0
    capsys.readouterr()
    assert main([*root, "acls", "--list", "--topic", "orders-"]) == 0
    listed = capsys.readouterr().out
    assert "ResourcePattern(resourceType=TOPIC, name=orders-, patternType=PREFIXED)" in listed
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in listed
    assert len(AclStore(store.storage).bindings()) == 4
    assert main([*root, "acls", "--remove", "--force", "--group", "app"]) == 0
    assert [b.resource_type for b in AclStore(store.storage).bindings()].count(RT.GROUP) == 0
    assert main([*root, "acls", "--remove", "--allow-principal", "User:alice", "--operation", "Write", "--topic",
                 "orders-", "--resource-pattern-type", "prefixed"]) == 0
    assert sorted(b.operation.name for b in AclStore(store.storage).bindings()) == ["ALL", "READ"]
    capsys.readouterr()
    assert main([*root, "acls", "--add", "--allow-principal", "alice", "--topic", "t"]) != 0
    assert main([*root, "acls", "--add", "--allow-principal", "User:alice", "--operation", "Fly", "--topic", "t"]) == 2
    assert "is not one of" in capsys.readouterr().err


def test_confluent_kafka_team_user_and_refused_reads_and_auto_creation(store, secured):
    """librdkafka as the team user: produce and consume in its group on its topic; producing to another topic is
    TOPIC_AUTHORIZATION_FAILED; a topic it may not create is not auto-created."""
    from confluent_kafka import Consumer, KafkaError, Producer

    AclStore(store.storage).create([binding(RT.TOPIC, "alice-", op, pattern=PT.PREFIXED) for op in (OP.READ, OP.WRITE)]
                                   + [binding(RT.GROUP, "alice-group", OP.READ)])
    conf = {"bootstrap.servers": f"127.0.0.1:{secured.port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"}
    errors = []
    producer = Producer({**conf, "enable.idempotence": True})
    for topic in ("alice-orders", "bob-orders"):
        producer.produce(topic, b"from librdkafka", on_delivery=lambda err, msg: errors.append(err and err.code()))
    producer.flush(20)
    assert sorted(errors, key=str) == [KafkaError.TOPIC_AUTHORIZATION_FAILED, None]
    consumer = Consumer({**conf, "group.id": "alice-group", "auto.offset.reset": "earliest"})
    consumer.subscribe(["alice-orders"])
    msg = None
    for _ in range(60):
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            break
    assert msg is not None and msg.value() == b"from librdkafka"
    consumer.commit(asynchronous=False)
    consumer.close()
    # Metadata asking for an unknown topic: auto-creation needs CREATE, so nothing is created
    probe = Producer(conf)
    probe.list_topics("alice-new", timeout=10)
    assert not store.topic_exists("alice-new")
    AclStore(store.storage).create([binding(RT.TOPIC, "alice-", OP.CREATE, pattern=PT.PREFIXED)])
    secured.apis.authz.authorizer.invalidate()
    probe.list_topics("alice-new", timeout=10)
    assert store.topic_exists("alice-new")


def test_admin_requests_of_a_team_user_are_refused_per_resource(store, secured):
    """CreateTopics, DescribeConfigs, DescribeGroups, DeleteGroups and ListGroups, each answering
    Kafka's code for the resource refused and serving the allowed ones."""
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
    from kafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError

    store.offsets_topic.commit("alice-group", {TopicPartitionD("alice-orders", 0): OffsetAndMetadata(0, "", -1)}, 0)
    store.offsets_topic.commit("bob-group", {TopicPartitionD("bob-orders", 0): OffsetAndMetadata(0, "", -1)}, 0)
    AclStore(store.storage).create([binding(RT.TOPIC, "alice-", OP.ALL, pattern=PT.PREFIXED),
                                    binding(RT.GROUP, "alice-group", OP.READ)])
    admin = KafkaAdminClient(**kp_conf(secured, "alice"))
    admin.create_topics([NewTopic("alice-new", 1, 1)])  # ALL on alice-* includes CREATE
    with pytest.raises(TopicAuthorizationFailedError):
        admin.create_topics([NewTopic("bob-new", 1, 1)])
    assert store.topic_exists("alice-new") and not store.topic_exists("bob-new")
    own = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "alice-orders")])
    assert "cleanup.policy" in own["topic"]["alice-orders"]
    refused = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "bob-orders")])
    assert refused["topic"]["bob-orders"] == {}  # kafka-python drops the resource's TOPIC_AUTHORIZATION_FAILED
    assert [g["group_id"] for g in admin.list_groups()] == ["alice-group"]  # bob-group exists, but is not its
    with pytest.raises(GroupAuthorizationFailedError):
        admin.describe_groups(["bob-group"])
    with pytest.raises(GroupAuthorizationFailedError):  # FindCoordinator for the group already refuses
        admin.delete_groups(["bob-group"])
    AclStore(store.storage).create([binding(RT.GROUP, "bob-group", OP.DESCRIBE)])  # found, described, not deleted
    secured.apis.authz.authorizer.invalidate()
    assert admin.describe_groups(["bob-group"])
    deleted = admin.delete_groups(["bob-group"])
    assert "bob-group" in repr(deleted) and "GroupAuthorizationFailed" in repr(deleted), deleted
    admin.close()
    assert "bob-group" in store.list_consumer_groups()


# -- deltalog serve --config with an authorizer, ACLs from `deltalog acls`, a real client ---------------------------

def _poll_until(consumer, want, seconds=30.0):
    """Messages and error codes a confluent-kafka consumer polls until ``want(values, codes)`` or ``seconds``."""
    import time

    values, codes = [], []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not want(values, codes):
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            codes.append(msg.error().code())
        else:
            values.append(msg.value())
    return values, codes


@pytest.mark.subprocess
def test_deltalog_serve_with_an_authorizer_gives_each_team_user_only_its_topics_and_group(tmp_path):
    """What an operator does: SCRAM users and ACLs made with the CLI (`deltalog configs`, `deltalog acls` with
    kafka-acls' flags), `deltalog serve --config server.properties` with the StandardAuthorizer and a super user; each
    team's user (confluent-kafka over SASL_PLAINTEXT, SCRAM-SHA-256) reaches only its own topics and group, the others
    refused with TOPIC_AUTHORIZATION_FAILED / GROUP_AUTHORIZATION_FAILED; an ACL removed by the CLI while the
    endpoint runs is enforced by it within its refresh."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    from confluent_kafka import Consumer, KafkaError, Producer

    from deltalog import Store
    from tooling.services import free_port

    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(repo) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("DELTALOG_STORE", None)
    store, port = tmp_path / "store", free_port()

    def cli(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "deltalog", "--store", str(store), *args], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
        return done.stdout

    for topic in ("team-a-orders", "team-b-orders"):
        cli("topics", "create", topic, "--partitions", "1")
    for user in ("admin", "alice", "bob"):
        cli("configs", "--alter", "--entity-type", "users", "--entity-name", user, "--add-config",
            f"SCRAM-SHA-256=[password={user}-secret]")
    for user, team in (("alice", "team-a"), ("bob", "team-b")):
        cli("acls", "--add", "--allow-principal", f"User:{user}", "--operation", "Read", "--operation", "Write",
            "--topic", f"{team}-", "--resource-pattern-type", "prefixed")
        cli("acls", "--add", "--allow-principal", f"User:{user}", "--operation", "Read", "--group", f"{team}-app")
    listed = cli("acls", "--list", "--principal", "User:alice")
    assert "name=team-a-, patternType=PREFIXED" in listed and "name=team-a-app, patternType=LITERAL" in listed
    assert "team-b" not in listed
    config = tmp_path / "server.properties"
    config.write_text(f"listeners=SASL_PLAINTEXT://127.0.0.1:{port}\nsasl.enabled.mechanisms=SCRAM-SHA-256\n"
                      f"authorizer.class.name={AUTHORIZER}\nsuper.users=User:admin\n")
    server = subprocess.Popen([sys.executable, "-m", "deltalog", "serve", "--config", str(config), "--store",
                               str(store)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    clients: list = []
    try:
        health = server.stdout.readline()
        assert f"listening on 127.0.0.1:{port} (SASL_PLAINTEXT" in health, health + server.stderr.read()

        def conf(user: str) -> dict:
            return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": f"{user}-secret"}

        def produce(user: str, topics: tuple[str, ...]) -> dict[str, int | None]:
            results: dict[str, int | None] = {}
            producer = Producer({**conf(user), "message.timeout.ms": 20000})
            for topic in topics:
                producer.produce(topic, f"from {user}".encode(), on_delivery=lambda err, msg, t=topic: results.
                                 __setitem__(t, err and err.code()))
            assert producer.flush(60) == 0
            return results

        assert produce("alice", ("team-a-orders", "team-b-orders")) == {
            "team-a-orders": None, "team-b-orders": KafkaError.TOPIC_AUTHORIZATION_FAILED}
        assert produce("bob", ("team-a-orders", "team-b-orders")) == {
            "team-a-orders": KafkaError.TOPIC_AUTHORIZATION_FAILED, "team-b-orders": None}
        assert produce("admin", ("team-a-orders", "team-b-orders")) == {"team-a-orders": None, "team-b-orders": None}

        # alice in her team's group: reads her topic and commits
        own = Consumer({**conf("alice"), "group.id": "team-a-app", "auto.offset.reset": "earliest",
                        "enable.auto.commit": False})
        clients.append(own)
        own.subscribe(["team-a-orders"])
        values, codes = _poll_until(own, lambda v, c: len(v) >= 2)
        assert values == [b"from alice", b"from admin"] and codes == []
        own.commit(asynchronous=False)
        own.close()
        clients.remove(own)
        # alice in bob's team's group: refused at the coordinator
        other_group = Consumer({**conf("alice"), "group.id": "team-b-app", "auto.offset.reset": "earliest"})
        clients.append(other_group)
        other_group.subscribe(["team-a-orders"])
        values, codes = _poll_until(other_group, lambda v, c: bool(c))
        assert values == [] and KafkaError.GROUP_AUTHORIZATION_FAILED in codes
        other_group.close()
        clients.remove(other_group)
        # alice subscribing her group to bob's team's topic: its Metadata is refused, librdkafka says so
        other_topic = Consumer({**conf("alice"), "group.id": "team-a-app", "auto.offset.reset": "earliest"})
        clients.append(other_topic)
        other_topic.subscribe(["team-b-orders"])
        values, codes = _poll_until(other_topic, lambda v, c: bool(c))
        assert values == [] and KafkaError.TOPIC_AUTHORIZATION_FAILED in codes
        other_topic.close()
        clients.remove(other_topic)

        # the CLI takes alice's Write away while the endpoint runs: the endpoint re-reads the store's ACLs
        cli("acls", "--remove", "--force", "--allow-principal", "User:alice", "--operation", "Write", "--topic",
            "team-a-", "--resource-pattern-type", "prefixed")
        time.sleep(1.5)  # deltalog.acls.REFRESH_S
        assert produce("alice", ("team-a-orders",)) == {"team-a-orders": KafkaError.TOPIC_AUTHORIZATION_FAILED}
    finally:
        for client in clients:
            client.close()
        stop_process(server, 30)
    opened = Store(str(store))
    assert [r.value for r in opened.read("team-a-orders", 0)] == [b"from alice", b"from admin"]
    assert [r.value for r in opened.read("team-b-orders", 0)] == [b"from bob", b"from admin"]
    assert [o.offset for o in opened.offsets_topic.committed("team-a-app").values()] == [2]
    assert opened.offsets_topic.committed("team-b-app") == {}


def test_authorized_operations_are_filled_when_the_client_asks(store, secured):
    """KIP-430 as Kafka's KafkaApis answers it, read by confluent-kafka's admin client: a topic's operations
    (Metadata's topic authorized operations), the cluster's (DescribeCluster: none without DESCRIBE on it) and a
    group's (DescribeGroups); without the flag the fields stay Kafka's "not asked"."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation as COP
    from confluent_kafka.admin import AdminClient

    AclStore(store.storage).create([binding(RT.TOPIC, "alice-", op, pattern=PT.PREFIXED) for op in (OP.READ, OP.WRITE)]
                                   + [binding(RT.GROUP, "alice-group", OP.READ)])

    def admin(user):
        return AdminClient({"bootstrap.servers": f"127.0.0.1:{secured.port}", "security.protocol": "SASL_PLAINTEXT",
                            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": f"{user}-secret"})

    def names(ops):
        return None if ops is None else sorted(o.name for o in ops)

    alice, root = admin("alice"), admin("admin")
    topic = alice.describe_topics(TopicCollection(["alice-orders"]), include_authorized_operations=True)
    assert names(topic["alice-orders"].result(20).authorized_operations) == ["DESCRIBE", "READ", "WRITE"]
    plain = alice.describe_topics(TopicCollection(["alice-orders"]))["alice-orders"].result(20)
    assert not plain.authorized_operations  # not asked
    # none without DESCRIBE on the cluster (a 0 bit field, which librdkafka gives as no list)
    assert not alice.describe_cluster(include_authorized_operations=True).result(20).authorized_operations
    everything = root.describe_cluster(include_authorized_operations=True).result(20).authorized_operations
    assert names(everything) == sorted(o.name for o in (COP.CREATE, COP.CLUSTER_ACTION, COP.DESCRIBE_CONFIGS,
                                                        COP.ALTER_CONFIGS, COP.IDEMPOTENT_WRITE, COP.ALTER,
                                                        COP.DESCRIBE))
    group = alice.describe_consumer_groups(["alice-group"], include_authorized_operations=True)["alice-group"]
    assert names(group.result(20).authorized_operations) == ["DESCRIBE", "READ"]
    assert names(root.describe_topics(TopicCollection(["bob-orders"]), include_authorized_operations=True)[
        "bob-orders"].result(20).authorized_operations) == ["ALTER", "ALTER_CONFIGS", "CREATE", "DELETE", "DESCRIBE",
                                                            "DESCRIBE_CONFIGS", "READ", "WRITE"]
