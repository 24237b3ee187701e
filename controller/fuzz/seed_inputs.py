#!/usr/bin/env python3
"""Writes the seed inputs of corpus/ctl_objects/ (already committed: rerun only to change them).
Each is small and names one case the target must get right; the input format is described at
the top of fuzz_ctl_objects.c. The Kubernetes client's targets have theirs in kube/fuzz."""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, 'corpus', target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# --- ctl_objects: byte 0 (low 2 bits % 3: Sandbox, SandboxTemplate, [claim, template];
# bit 2 gRPC probes; bit 3 a default runtime class), then the JSON
SANDBOX, TEMPLATE, CLAIM, GRPC, DEFAULT_RC = 0, 1, 2, 4, 8


def sandbox(spec, name='sb', **md):
    return {'apiVersion': 'agents.x-k8s.io/v1beta1', 'kind': 'Sandbox',
            'metadata': dict({'name': name, 'namespace': 'ns', 'uid': 'u-sb'}, **md),
            'spec': {'podTemplate': {'metadata': {'labels': {'app': 'x'}}, 'spec': spec}}}


def tmpl(spec, name='tpl', **extra):
    return {'kind': 'SandboxTemplate', 'metadata': {'name': name, 'namespace': 'ns', 'uid': 'u-t'},
            'spec': dict({'podTemplate': {'spec': spec}}, **extra)}


def claim(spec, name='cl'):
    return {'kind': 'SandboxClaim', 'metadata': {'name': name, 'namespace': 'ns', 'uid': 'u-c'},
            'spec': dict({'warmPoolRef': {'name': 'pool'}}, **spec)}


main = {'name': 'main', 'image': 'python:3', 'command': ['python'], 'args': ['-c', 'pass']}
objects = {
    'sandbox_plain': (SANDBOX | DEFAULT_RC, sandbox({'containers': [main]})),
    'sandbox_grpc': (SANDBOX | GRPC, sandbox({'containers': [{'name': 'm', 'image': 'x'}]})),
    'sandbox_no_containers': (SANDBOX, sandbox({'containers': []})),
    'sandbox_automount_null': (SANDBOX, sandbox({'containers': [main],
                                                 'automountServiceAccountToken': None})),
    'sandbox_automount_true': (SANDBOX, sandbox({'containers': [main],
                                                 'automountServiceAccountToken': True})),
    'sandbox_automount_string': (SANDBOX, sandbox({'containers': [main],
                                                   'automountServiceAccountToken': 'true'})),
    'sandbox_runtime_null': (SANDBOX | DEFAULT_RC, sandbox({'containers': [main],
                                                            'runtimeClassName': None})),
    'sandbox_runtime_own': (SANDBOX | DEFAULT_RC, sandbox({'containers': [main],
                                                           'runtimeClassName': 'kata'})),
    'sandbox_probe_null': (SANDBOX, sandbox({'containers': [dict(main, readinessProbe=None)]})),
    'sandbox_port_clash': (SANDBOX, sandbox({'containers': [dict(main, ports=[
        {'containerPort': 9090}])]})),
    'sandbox_port_name_clash': (SANDBOX, sandbox({'containers': [dict(main, ports=[
        {'name': 'sandboxd-http', 'containerPort': 1234}])]})),
    'sandbox_ports_moved_twice': (SANDBOX, sandbox({'containers': [dict(main, ports=[
        {'containerPort': 8080}]), {'name': 's', 'image': 'y', 'ports': [{'containerPort': 18080}]}],
        'initContainers': [{'name': 'i', 'restartPolicy': 'Always', 'ports': [
            {'containerPort': 19091}, {'containerPort': 70000}]}]})),
    'sandbox_grpc_ports_moved': (SANDBOX | GRPC, sandbox({'containers': [dict(main, ports=[
        {'containerPort': 9090, 'name': 'app'}])]})),
    'sandbox_port_name_in_init': (SANDBOX, sandbox({'containers': [main], 'initContainers': [
        {'name': 'i', 'ports': [{'name': 'sandboxd-grpc', 'containerPort': 1}]}]})),
    'sandbox_mount_clash': (SANDBOX, sandbox({'containers': [dict(main, volumeMounts=[
        {'name': 'v', 'mountPath': '/var/run/sandboxd'}])]})),
    'sandbox_volume_clash': (SANDBOX, sandbox({'containers': [main],
                                               'volumes': [{'name': 'sandboxd-bin'}]})),
    'sandbox_init_clash': (SANDBOX, sandbox({'containers': [main], 'initContainers': [
        {'name': 'sandboxd-injector'}]})),
    'sandbox_command_string': (SANDBOX, sandbox({'containers': [dict(main, command='python')]})),
    'sandbox_command_numbers': (SANDBOX, sandbox({'containers': [dict(main, args=[1, 2])]})),
    'sandbox_container_string': (SANDBOX, sandbox({'containers': ['main']})),
    'sandbox_long_name': (SANDBOX, sandbox({'containers': [main]}, name='n' * 250)),
    'template_plain': (TEMPLATE | DEFAULT_RC, tmpl({'containers': [main]}, service=True)),
    'template_no_pod': (TEMPLATE, {'metadata': {'name': 't', 'namespace': 'ns'}, 'spec': {}}),
    'template_pod_string': (TEMPLATE, tmpl(None) | {'spec': {'podTemplate': 'x'}}),
    'template_service_string': (TEMPLATE, tmpl({'containers': [main]}, service='yes')),
    'claim_plain': (CLAIM, [claim({}), tmpl({'containers': [main]})]),
    'claim_env': (CLAIM, [claim({'env': [{'name': 'A', 'value': '1'},
                                         {'name': 'B', 'containerName': 'main'},
                                         {'name': 'C', 'value': '3', 'containerName': 'other'}]}),
                          tmpl({'containers': [main, {'name': 'other', 'image': 'y'}]})]),
    'claim_env_bad': (CLAIM, [claim({'env': [{'name': 5}]}), tmpl({'containers': [main]})]),
    'claim_lifecycle': (CLAIM, [claim({'lifecycle': {'shutdownTime': '2030-01-01T00:00:00Z',
                                                     'shutdownPolicy': 'Whatever'}}),
                                tmpl({'containers': [main]})]),
    'claim_label_override': (CLAIM, [claim({'additionalPodMetadata': {'labels': {
        'agents.x-k8s.io/sandbox-template-ref-hash': 'other', 'team': 'a'}}}),
        tmpl({'containers': [main]})]),
    'claim_label_number': (CLAIM, [claim({'additionalPodMetadata': {'annotations': {'a': 1}}}),
                                   tmpl({'containers': [main]})]),
    'sandbox_vct': (SANDBOX, dict(sandbox({'containers': [main], 'volumes': [
        {'name': 'workspace', 'emptyDir': {}}, {'name': 'keep', 'emptyDir': {}}]}),
        spec=dict(sandbox({'containers': [main]})['spec'], volumeClaimTemplates=[
            {'metadata': {'name': 'workspace', 'labels': {'a': 'b'}},
             'spec': {'resources': {'requests': {'storage': '1Gi'}}}}]))),
    'sandbox_vct_twice': (SANDBOX, dict(sandbox({'containers': [main]}), spec=dict(
        sandbox({'containers': [main]})['spec'], volumeClaimTemplates=[
            {'metadata': {'name': 'w'}, 'spec': {}}, {'metadata': {'name': 'w'}, 'spec': {}}]))),
    'sandbox_vct_unnamed': (SANDBOX, dict(sandbox({'containers': [main]}), spec=dict(
        sandbox({'containers': [main]})['spec'], volumeClaimTemplates=[{'spec': {}}]))),
    'sandbox_vct_no_spec': (SANDBOX, dict(sandbox({'containers': [main]}), spec=dict(
        sandbox({'containers': [main]})['spec'], volumeClaimTemplates=[
            {'metadata': {'name': 'w'}, 'spec': None}]))),
    'template_vct': (TEMPLATE, tmpl({'containers': [main]}, volumeClaimTemplates=[
        {'metadata': {'name': 'w'}, 'spec': {'storageClassName': 's'}}])),
    'claim_vct_disallowed': (CLAIM, [claim({'volumeClaimTemplates': [
        {'metadata': {'name': 'x'}, 'spec': {}}]}), tmpl({'containers': [main]})]),
    'claim_vct_allowed': (CLAIM, [claim({'volumeClaimTemplates': [
        {'metadata': {'name': 'x'}, 'spec': {}}]}), tmpl({'containers': [main]},
        volumeClaimTemplatesPolicy='Allowed', volumeClaimTemplates=[
            {'metadata': {'name': 'w'}, 'spec': {}}])]),
    'claim_vct_overrides': (CLAIM, [claim({'volumeClaimTemplates': [
        {'metadata': {'name': 'w'}, 'spec': {'storageClassName': 'c'}},
        {'metadata': {'name': 'x'}, 'spec': {}}]}), tmpl({'containers': [main]},
        volumeClaimTemplatesPolicy='Overrides', volumeClaimTemplates=[
            {'metadata': {'name': 'w'}, 'spec': {}}])]),
    'sandbox_entrypoint': (SANDBOX, sandbox({'containers': [{'name': 'm', 'image': 'x',
                                                            'args': ['-v']}]}) | {'spec': {
        'podTemplate': {'metadata': {'annotations': {'sandboxd.dev/entrypoint': '["/init", "a"]'}},
                        'spec': {'containers': [{'name': 'm', 'image': 'x', 'args': ['-v']}]}}}}),
    'sandbox_entrypoint_bad': (SANDBOX, sandbox({'containers': [main]}) | {'spec': {
        'podTemplate': {'metadata': {'annotations': {'sandboxd.dev/entrypoint': '["/init", 1]'}},
                        'spec': {'containers': [main]}}}}),
    'sandbox_entrypoint_with_command': (SANDBOX, sandbox({'containers': [main]}) | {'spec': {
        'podTemplate': {'metadata': {'annotations': {'sandboxd.dev/entrypoint': '["/init"]'}},
                        'spec': {'containers': [main]}}}}),
    'sandbox_e2b': (SANDBOX, sandbox({'containers': [main]}) | {'spec': {
        'podTemplate': {'metadata': {'annotations': {'sandboxd.dev/e2b': 'true'}},
                        'spec': {'containers': [main | {'ports': [{'containerPort': 8080}]}]}}}}),
    'sandbox_e2b_port_clash': (SANDBOX, sandbox({'containers': [main]}) | {'spec': {
        'podTemplate': {'metadata': {'annotations': {'sandboxd.dev/e2b': 'true'}},
                        'spec': {'containers': [main | {'ports': [{'containerPort': 49983}]}]}}}}),
}
for name, (mode, obj) in objects.items():
    write('ctl_objects', name, bytes([mode]) + json.dumps(obj).encode())

# --- ctl_registry: byte 0 % 5 chooses the parser (manifest, config, challenge, docker config,
# image reference); for a manifest, (byte 0 / 5) % 8 the content type and / 8 % 4 the arch
MANIFEST, CONFIG, CHALLENGE, DOCKERCFG, REF = range(5)
D1, D2 = 'sha256:' + '0' * 63 + '1', 'sha256:' + 'a' * 64


def mode(parser, ctype=0, arch=0):
    return parser + 5 * (ctype + 8 * arch)


index = {'schemaVersion': 2, 'mediaType': 'application/vnd.oci.image.index.v1+json',
         'manifests': [{'digest': D1, 'platform': {'os': 'linux', 'architecture': 'amd64'}},
                       {'digest': D2, 'platform': {'os': 'linux', 'architecture': 'arm64',
                                                   'variant': 'v8'}}]}
image = {'schemaVersion': 2, 'config': {'digest': D1, 'mediaType': 'x'}, 'layers': []}
registry = {
    'manifest_index': (mode(MANIFEST), index),
    'manifest_index_arm': (mode(MANIFEST, 1, 2), index),
    'manifest_index_missing': (mode(MANIFEST, 3, 3), index),
    'manifest_image': (mode(MANIFEST, 4), image),
    'manifest_image_shape': (mode(MANIFEST, 5), image),
    'manifest_schema1': (mode(MANIFEST), {'schemaVersion': 1, 'name': 'x', 'fsLayers': []}),
    'manifest_bad_digest': (mode(MANIFEST, 2), {'schemaVersion': 2, 'config': {'digest': 'sha256:1'}}),
    'config_full': (mode(CONFIG), {'config': {'Entrypoint': ['/bin/app'], 'Cmd': ['-v'],
                                              'WorkingDir': '/srv'}}),
    'config_nulls': (mode(CONFIG), {'config': {'Entrypoint': None, 'Cmd': None}}),
    'config_bad_cmd': (mode(CONFIG), {'config': {'Cmd': 'sh -c x'}}),
    'challenge_bearer': (mode(CHALLENGE), 'Bearer realm="https://auth.docker.io/token",'
                         'service="registry.docker.io",scope="repository:library/busybox:pull"'),
    'challenge_basic': (mode(CHALLENGE), 'Basic realm="a \\"quoted\\" realm"'),
    'challenge_several': (mode(CHALLENGE), 'Negotiate abc, Basic realm=x, Bearer realm=y'),
    'challenge_open_quote': (mode(CHALLENGE), 'Bearer realm="https://t'),
    'dockercfg_json': (mode(DOCKERCFG), {'auths': {'r.io': {'auth': 'dTpwOnc='},
                                                   '*.r.io': {'username': 'w', 'password': 'x'},
                                                   'https://index.docker.io/v1/': {'auth': '!!'}}}),
    'dockercfg_legacy': (mode(DOCKERCFG), {'r.io:5000': {'username': 'u', 'password': 'p'}}),
    'ref_hub': (mode(REF), 'busybox'),
    'ref_full': (mode(REF), f'127.0.0.1:5000/a/b_c:v1@{D2}'),
    'ref_v6': (mode(REF), '[::1]:5000/app:dev'),
    'ref_bad': (mode(REF), 'Not/A/Ref:'),
}
for name, (m, v) in registry.items():
    write('ctl_registry', name, bytes([m]) + (v if isinstance(v, str) else json.dumps(v)).encode())
