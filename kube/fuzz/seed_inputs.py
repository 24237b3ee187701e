#!/usr/bin/env python3
"""Writes the seed inputs of corpus/{kube_watch,kube_config}/ (already committed: rerun only to
change them). Each is small and names one case the target must get right; the input formats are
described at the top of each fuzz_<name>.c."""
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


# --- kube_watch: byte 0 seeds the chunk sizes, then the stream
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
    write('kube_watch', name, bytes([i * 37 % 256]) + text.encode())


# --- kube_config: the file
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
    write('kube_config', name, text)
