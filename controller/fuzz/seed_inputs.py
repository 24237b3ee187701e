#!/usr/bin/env python3
"""Writes the seed inputs of corpus/{ctl_watch,ctl_objects,ctl_kubeconfig}/ (already committed:
rerun only to change them). Each is small and names one case the target must get right; the
input formats are described at the top of each fuzz_<name>.c."""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, 'corpus', target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def line(obj):
    return json.dumps(obj, separators=(',', ':')) + '\n'


def pod(name, ns='default', rv='10', **extra):
    md = {'name': name, 'namespace': ns, 'resourceVersion': rv,
          'managedFields': [{'manager': 'kubectl'}]}
    return dict({'apiVersion': 'v1', 'kind': 'Pod', 'metadata': md}, **extra)


# --- ctl_watch: byte 0 seeds the chunk sizes, then the stream
watch = {
    'added': line({'type': 'ADDED', 'object': pod('a')}),
    'modified_deleted': line({'type': 'MODIFIED', 'object': pod('a', rv='11')}) +
    line({'type': 'DELETED', 'object': pod('a', rv='12')}),
    'bookmark': line({'type': 'BOOKMARK', 'object': {'metadata': {'resourceVersion': '99'}}}),
    'bookmark_bad_rv': line({'type': 'BOOKMARK',
                             'object': {'metadata': {'resourceVersion': '1&watch=0 x'}}}),
    'error_410': line({'type': 'ERROR', 'object': {'kind': 'Status', 'code': 410,
                                                   'message': 'too old resource version'}}),
    'error_500': line({'type': 'ERROR', 'object': {'kind': 'Status', 'code': 500,
                                                   'message': 'internal'}}),
    'status_410_no_newline': json.dumps({'kind': 'Status', 'code': 410, 'reason': 'Expired'}),
    'status_403': line({'kind': 'Status', 'code': 403, 'message': 'forbidden'}),
    'unknown_type': line({'type': 'SYNC', 'object': pod('b')}),
    'no_name': line({'type': 'ADDED', 'object': {'metadata': {'namespace': 'x'}}}),
    'name_slash': line({'type': 'ADDED', 'object': pod('a/b')}),
    'name_query': line({'type': 'ADDED', 'object': pod('a?watch=1')}),
    'cluster_scoped': line({'type': 'ADDED', 'object': {'metadata': {'name': 'node1'}}}),
    'object_not_object': line({'type': 'ADDED', 'object': [1, 2]}),
    'not_json': 'not json\n' + line({'type': 'ADDED', 'object': pod('c')}),
    'empty_lines': '\n\n' + line({'type': 'ADDED', 'object': pod('d')}) + '\n\n',
    'long_line': line({'type': 'ADDED', 'object': pod('e', labels='x' * 3000)}),
    'list_page': line({'kind': 'PodList', 'metadata': {'resourceVersion': '5', 'continue': 'abc'},
                       'items': [pod('a'), pod('b'), {'metadata': {}}, pod('a', rv='7')]}),
    'list_bad_continue': line({'metadata': {'continue': 'a b'}, 'items': []}),
    'list_no_items': line({'metadata': {}, 'items': None}),
    'crlf': line({'type': 'ADDED', 'object': pod('f')}).replace('\n', '\r\n'),
}
for i, (name, text) in enumerate(sorted(watch.items())):
    write('ctl_watch', name, bytes([i * 37 % 256]) + text.encode())

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
}
for name, (mode, obj) in objects.items():
    write('ctl_objects', name, bytes([mode]) + json.dumps(obj).encode())

# --- ctl_kubeconfig: the file
kc = '''apiVersion: v1
kind: Config
current-context: test
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority: ca.crt
    certificate-authority-data: aGVsbG8gd29ybGQ=
contexts:
- name: test
  context: {cluster: c, user: u, namespace: ns1}
users:
- name: u
  user:
    token: abc
    client-key-data: aGVs
      bG8=
    client-certificate: /abs/cert.pem
'''
kubeconfigs = {
    'yaml': kc,
    'json': json.dumps({'current-context': 'x', 'contexts': [
        {'name': 'x', 'context': {'cluster': 'c', 'user': 'u'}}], 'clusters': [
        {'name': 'c', 'cluster': {'server': 'https://h:1', 'insecure-skip-tls-verify': True}}],
        'users': [{'name': 'u', 'user': {'tokenFile': 'tok'}}]}),
    'insecure_string': kc.replace('    server:', '    insecure-skip-tls-verify: "true"\n    server:'),
    'no_server': kc.replace('    server: https://127.0.0.1:6443\n', ''),
    'no_context': kc.replace('current-context: test', 'current-context: nope'),
    'alias': 'a: &x {b: 1}\nc: *x\n',
    'deep': '[' * 70 + ']' * 70,
    'base64_lone': kc.replace('aGVsbG8gd29ybGQ=', 'aGVsbG8gd29ybGQ=a'),
    'base64_bad_pad': kc.replace('aGVsbG8gd29ybGQ=', 'aGVsbG8gd29ybGQ==='),
    'base64_no_pad': kc.replace('aGVsbG8gd29ybGQ=', 'aGVsbG8gd29ybGQ'),
    'numbers': '{"a": [1, -2, 9223372036854775807, "x\\u00e9\\n", true, null, {}], "b": ""}',
    'scalars': 'a: 0x10\nb: +5\nc: -\nd: ~\ne: 010\nf: "1"\ng: \'\'\n',
    'multi_doc': '---\na: 1\n---\nb: 2\n',
    'tabs': 'a:\t1\n',
    'bom': '\ufeffa: 1\n',
    'nul': 'a: "\\0"\n',
    'empty': '',
}
for name, text in kubeconfigs.items():
    write('ctl_kubeconfig', name, text)
