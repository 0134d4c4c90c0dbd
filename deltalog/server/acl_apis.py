"""Kafka's DescribeAcls (API key 29), CreateAcls (30) and DeleteAcls (31) on the store's ACLs (:mod:`deltalog.acls`):
what ``kafka-acls --bootstrap-server`` and the admin clients' ``describe_acls`` / ``create_acls`` / ``delete_acls``
send. DESCRIBE on the cluster is needed to list them and ALTER on the cluster to change them
(:mod:`deltalog.server.authorization`); an endpoint without ``authorizer.class.name`` answers SECURITY_DISABLED, as
a Kafka broker without an authorizer does. Version 0 carries no pattern type: it means LITERAL, in bindings and
filters, as Kafka reads v0.
"""

from __future__ import annotations

from typing import Any

from deltalog.acls import AclBinding, AclFilter, AclOperation, AclPermissionType, AclStore, PatternType, ResourceType
from deltalog.errors import DeltalogError
from deltalog.server import protocol as p
from deltalog.server.authorization import RequestAuthorizer
from deltalog.server.served_store import ServedStore

_DISABLED = "No Authorizer is configured on the broker (authorizer.class.name)"


def _enum(kind: Any, value: int) -> Any:
    try:
        return kind(value)
    except ValueError:
        return kind(0)  # UNKNOWN


def _filter(request: p.Request, f: Any, resource_type: str, name: str) -> AclFilter:
    pattern = getattr(f, "pattern_type_filter", PatternType.LITERAL) if request.api_version >= 1 else (
        PatternType.LITERAL)
    return AclFilter(_enum(ResourceType, getattr(f, resource_type)), getattr(f, name), _enum(PatternType, pattern),
                     f.principal_filter, f.host_filter, _enum(AclOperation, f.operation),
                     _enum(AclPermissionType, f.permission_type))


def handle_describe(authz: RequestAuthorizer, store: ServedStore, request: p.Request) -> Any:
    cls = request.response_class
    if not authz.enabled:
        return cls(throttle_time_ms=0, error_code=p.SECURITY_DISABLED, error_message=_DISABLED, resources=[])
    try:
        found = AclStore(store.storage).describe(_filter(request, request.body, "resource_type_filter",
                                                         "resource_name_filter"))
    except DeltalogError as e:
        return cls(throttle_time_ms=0, error_code=e.errno, error_message=str(e), resources=[])
    by_resource: dict[tuple[int, str, int], list[AclBinding]] = {}
    for b in found:
        by_resource.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    return cls(throttle_time_ms=0, error_code=p.NONE, error_message=None, resources=[
        cls.DescribeAclsResource(resource_type=rt, resource_name=name, pattern_type=pt, acls=[
            cls.DescribeAclsResource.AclDescription(principal=b.principal, host=b.host, operation=b.operation,
                                                    permission_type=b.permission) for b in bs])
        for (rt, name, pt), bs in sorted(by_resource.items())])


def handle_create(authz: RequestAuthorizer, store: ServedStore, request: p.Request) -> Any:
    cls = request.response_class
    if not authz.enabled:
        return cls(throttle_time_ms=0, results=[cls.AclCreationResult(error_code=p.SECURITY_DISABLED,
                                                                      error_message=_DISABLED)
                                                for _ in request.body.creations])
    acls = AclStore(store.storage)
    results = []
    for c in request.body.creations:
        pattern = c.resource_pattern_type if request.api_version >= 1 else PatternType.LITERAL
        try:
            acls.create([AclBinding(_enum(ResourceType, c.resource_type), c.resource_name,
                                    _enum(PatternType, pattern), c.principal, c.host,
                                    _enum(AclOperation, c.operation), _enum(AclPermissionType, c.permission_type))])
            results.append(cls.AclCreationResult(error_code=p.NONE, error_message=None))
        except DeltalogError as e:
            results.append(cls.AclCreationResult(error_code=e.errno, error_message=str(e)))
    authz.authorizer.invalidate()
    return cls(throttle_time_ms=0, results=results)


def handle_delete(authz: RequestAuthorizer, store: ServedStore, request: p.Request) -> Any:
    cls = request.response_class
    result = cls.DeleteAclsFilterResult
    if not authz.enabled:
        return cls(throttle_time_ms=0, filter_results=[result(error_code=p.SECURITY_DISABLED, error_message=_DISABLED,
                                                              matching_acls=[]) for _ in request.body.filters])
    filters = [_filter(request, f, "resource_type_filter", "resource_name_filter") for f in request.body.filters]
    try:
        removed = AclStore(store.storage).delete(filters)
    except DeltalogError as e:
        return cls(throttle_time_ms=0, filter_results=[result(error_code=e.errno, error_message=str(e),
                                                              matching_acls=[]) for _ in filters])
    authz.authorizer.invalidate()
    return cls(throttle_time_ms=0, filter_results=[result(error_code=p.NONE, error_message=None, matching_acls=[
        result.DeleteAclsMatchingAcl(error_code=p.NONE, error_message=None, resource_type=b.resource_type,
                                     resource_name=b.resource_name, pattern_type=b.pattern_type,
                                     principal=b.principal, host=b.host, operation=b.operation,
                                     permission_type=b.permission) for b in bs]) for bs in removed])
