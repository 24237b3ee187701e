#!/usr/bin/env python3
"""pbjson against Python protobuf's json_format (MessageToJson with JSON names), over envd's
messages: for each case, the text sbx_pbjson_encode writes for the binary message is exactly
json_format's (made compact; where a map is not empty, the same JSON: Python orders a map's keys
as its hash table does, we sort them), and what sbx_pbjson_decode reads from json_format's text is the
same message. The protos are compiled for Python by protoc here.

Usage: pbjson_python.py PBJSON_CONV PROTOC PROTO_DIR   (exits 77, skipped, without the
python protobuf package)"""
import json
import os
import subprocess
import sys
import tempfile

try:
    from google.protobuf import json_format
except ImportError:
    print('skip: no python protobuf')
    sys.exit(77)

CONV, PROTOC, PROTO_DIR = sys.argv[1:4]
MAP_FIELDS = ('envs', 'metadata')

CASES = [
    ('process.StartRequest', {'process': {'cmd': '/bin/bash', 'args': ['-l', '-c', 'echo "hi"\n'],
                                          'envs': {'A': '1', 'B': ''}, 'cwd': ''},
                              'stdin': False, 'tag': 'x\u00e9\u0001'}),
    ('process.StartRequest', {'process': {'cmd': 'sh'}, 'pty': {'size': {'cols': 80, 'rows': 24}}}),
    ('process.StartRequest', {}),
    ('process.StartResponse', {'event': {'data': {'stdout': 'aGkK+/8='}}}),
    ('process.StartResponse', {'event': {'data': {'pty': ''}}}),
    ('process.StartResponse', {'event': {'start': {'pid': 0}}}),
    ('process.StartResponse', {'event': {'end': {'exitCode': -9, 'exited': False,
                                                 'status': 'signal: killed', 'error': ''}}}),
    ('process.StartResponse', {'event': {'keepalive': {}}}),
    ('process.ListResponse', {'processes': [{'config': {'cmd': 'a', 'cwd': '/'}, 'pid': 4294967295,
                                             'tag': 't'}, {'pid': 1}]}),
    ('process.SendSignalRequest', {'process': {'tag': ''}, 'signal': 'SIGNAL_SIGTERM'}),
    ('process.SendSignalRequest', {'process': {'pid': 3}, 'signal': 7}),
    ('process.SendInputRequest', {'process': {'pid': 3}, 'input': {'stdin': 'AA=='}}),
    ('process.StreamInputRequest', {'data': {'input': {'pty': 'AQID'}}}),
    ('process.UpdateRequest', {'process': {'pid': 1}, 'pty': {}}),
    ('filesystem.StatResponse', {'entry': {
        'name': 'a', 'type': 'FILE_TYPE_DIRECTORY', 'path': '/a', 'size': '-9223372036854775808',
        'mode': 493, 'permissions': 'drwxr-xr-x', 'owner': 'root', 'group': 'root',
        'modifiedTime': '2026-12-02T10:00:00.000001Z', 'symlinkTarget': '',
        'metadata': {'a': 'b', 'c': ''}}}),
    ('filesystem.ListDirResponse', {'entries': [
        {'name': 'x', 'modifiedTime': '0001-01-01T00:00:00Z', 'size': '9223372036854775807'},
        {'modifiedTime': '9999-12-31T23:59:59.999999999Z'},
        {'modifiedTime': '1970-01-01T00:00:00.120Z'}]}),
    ('filesystem.WatchDirResponse', {'filesystem': {'name': 'f', 'type': 'EVENT_TYPE_RENAME',
                                                    'entry': {}}}),
    ('filesystem.WatchDirResponse', {'start': {}}),
    ('filesystem.GetWatcherEventsResponse', {'events': [{'type': 'EVENT_TYPE_CHMOD'}, {}]}),
]


def maps(value):
    """Whether value holds a map of two keys or more."""
    if isinstance(value, list):
        return any(maps(v) for v in value)
    if isinstance(value, dict):
        return any((k in MAP_FIELDS and len(v) > 1) or maps(v) for k, v in value.items())
    return False


def conv(type_name, mode, data):
    p = subprocess.run([CONV, type_name, mode], input=data, capture_output=True, check=False)
    if p.returncode:
        raise RuntimeError(p.stderr.decode())
    return p.stdout


def main():
    tmp = tempfile.mkdtemp()
    subprocess.check_call([PROTOC, '-I' + PROTO_DIR, '--python_out=' + tmp,
                           'e2b/process/process.proto', 'e2b/filesystem/filesystem.proto'])
    sys.path.insert(0, tmp)
    from e2b.filesystem import filesystem_pb2
    from e2b.process import process_pb2
    mods = {'process': process_pb2, 'filesystem': filesystem_pb2}
    failed = 0
    for n, (type_name, value) in enumerate(CASES, 1):
        pkg, name = type_name.split('.')
        m = json_format.ParseDict(value, getattr(mods[pkg], name)())
        theirs = json_format.MessageToJson(m, preserving_proto_field_name=False)
        want = json.dumps(json.loads(theirs), separators=(',', ':'), ensure_ascii=False)
        ours = conv(type_name, 'b2j', m.SerializeToString()).decode()
        back = getattr(mods[pkg], name)()
        back.ParseFromString(conv(type_name, 'j2b', theirs.encode()))
        same = ours == want or (maps(value) and json.loads(ours) == json.loads(want))
        good = same and back == m
        failed += not good
        print(f'{"ok" if good else "not ok"} {n} - {type_name} {want}')
        if not good:
            print(f'#   ours {ours}\n#   read back {json_format.MessageToJson(back)}')
    print(f'1..{len(CASES)}')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
