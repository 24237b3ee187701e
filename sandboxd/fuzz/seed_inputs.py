#!/usr/bin/env python3
"""Writes the seed inputs of corpus/{path,http_args,move_body,grpc_requests,http_requests,
http_head,ws_frame,connect,pbjson,h2c_resp}/ (already committed: rerun only to change them). Each is small and names one case the
target must get right; the input formats are described at the top of each fuzz_<name>.c."""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, 'corpus', target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# --- path: op byte (low 6 bits % 7; 0x80 flag, 0x40 parents), then the path
OPEN, LIST, LSTAT, OPENDIR, MKDIR, DELETE, WRITE = range(7)
FLAG, PARENTS = 0x80, 0x40
paths = [
    ('open_file', OPEN, 'file'), ('open_nested', OPEN, 'dir/file'),
    ('open_abs', OPEN, '/file'), ('open_dotdot', OPEN, '../secret'),
    ('open_abs_dotdot', OPEN, '/../../secret'), ('open_up', OPEN, 'up/secret'),
    ('open_abs_link', OPEN, 'abs'), ('open_abs_link_in', OPEN, 'abs/x'),
    ('open_absin', OPEN, 'absin/file'), ('open_dotdot_link', OPEN, 'dotdot'),
    ('open_loop', OPEN | FLAG, 'loop'), ('open_root_prefix', OPEN, '{root}/dir/file'),
    ('open_root_prefix_up', OPEN, '{root}/../secret'), ('open_dots', OPEN, 'dir/./sub/../file'),
    ('open_empty', OPEN, ''), ('open_slashes', OPEN, '//dir///file/'),
    ('open_utf8', OPEN, 'dir/\u00e9t\u00e9'), ('list_root', LIST, '.'), ('list_dir', LIST, 'dir'),
    ('list_absin', LIST, 'absin'), ('list_up', LIST, 'up'), ('lstat_dotdot', LSTAT, 'dotdot'),
    ('lstat_abs', LSTAT, 'abs'), ('lstat_root', LSTAT, '/'), ('lstat_up_x', LSTAT, 'up/secret'),
    ('opendir_create', OPENDIR | FLAG, 'new/deep/dir'), ('opendir_abs', OPENDIR | FLAG, 'abs/x'),
    ('opendir_up', OPENDIR | FLAG, 'up/x'), ('mkdir_parents', MKDIR | PARENTS, 'a/b/c'),
    ('mkdir_abs', MKDIR | PARENTS, 'abs/new'), ('mkdir_file', MKDIR, 'file/x'),
    ('mkdir_up', MKDIR | PARENTS | FLAG, 'up/new'), ('delete_dir', DELETE | FLAG, 'dir'),
    ('delete_root', DELETE | FLAG, '.'), ('delete_abs', DELETE, 'abs'),
    ('delete_up', DELETE | FLAG, 'up/outside'), ('delete_through', DELETE | FLAG, 'absin/file'),
    ('write_new', WRITE, 'new/file'), ('write_absin', WRITE, 'absin/f'),
    ('write_abs', WRITE, 'abs/f'), ('write_dotdot', WRITE, 'dotdot'), ('write_dir', WRITE, 'dir'),
    ('write_up', WRITE, 'up/secret'), ('write_abort', WRITE | FLAG, 'file'),
    ('write_root_prefix', WRITE, '{root}/x'),
]
for name, op, p in paths:
    write('path', name, bytes([op]) + p.encode())

# --- http_args: op byte (% 3: mode, bool, Range), for Range 8 bytes of size (little endian)
for name, s in [('ok', '0644'), ('dir', '0755'), ('short', '644'), ('digit', '0789'),
                ('long', '07777'), ('sign', '0+64')]:
    write('http_args', 'mode_' + name, b'\0' + s.encode())
for name, s in [('true', 'true'), ('False', 'False'), ('yes', 'yes'), ('one', '1'),
                ('space', ' 1'), ('empty', '')]:
    write('http_args', 'bool_' + name, b'\1' + s.encode())
for name, size, s in [('first', 1000, 'bytes=0-99'), ('suffix', 1000, 'bytes=-5'),
                      ('open', 1000, 'bytes=5-'), ('past', 10, 'bytes=20-30'),
                      ('clamp', 10, 'bytes=5-100'), ('empty_file', 0, 'bytes=0-'),
                      ('suffix_big', 10, 'bytes=-50'), ('suffix_zero', 10, 'bytes=-0'),
                      ('backwards', 1000, 'bytes=9-3'), ('several', 1000, 'bytes=0-1,2-3'),
                      ('huge', 1000, 'bytes=99999999999999999999999-'),
                      ('signed', 1000, 'bytes=--5'), ('plus', 1000, 'bytes=+1-2'),
                      ('space', 1000, 'bytes= 1-2'), ('unit', 1000, 'items=0-1')]:
    write('http_args', 'range_' + name, b'\2' + struct.pack('<Q', size) + s.encode())
# op 3: a range set (8 bytes of size, then the header); op 4: a condition (If-None-Match,
# If-Range or a date) against the target's fixed tag and mtime
for name, size, s in [('two', 1000, 'bytes=0-1,5-6'), ('blanks', 1000, 'bytes=0-1 ,, -5 , '),
                      ('one_past', 10, 'bytes=20-,0-0'), ('none', 10, 'bytes=20-,30-40'),
                      ('bad_one', 1000, 'bytes=0-1,x'), ('no_comma', 1000, 'bytes=0-1 2-3'),
                      ('many', 1000, 'bytes=' + ','.join(f'{i}-{i}' for i in range(17))),
                      ('overlap', 1000, 'bytes=0-999,1-1000')]:
    write('http_args', 'ranges_' + name, b'\3' + struct.pack('<Q', size) + s.encode())
for name, s in [('tag', '"a1-14-65.000000001"'), ('weak', 'W/"a1-14-65.000000001"'),
                ('star', '*'), ('list', '"x", W/"a1-14-65.000000001"'), ('bad', '"x" y'),
                ('imf', 'Sun, 06 Nov 1994 08:49:37 GMT'), ('rfc850', 'Sunday, 06-Nov-94 08:49:37 GMT'),
                ('asctime', 'Sun Nov  6 08:49:37 1994'), ('date_junk', 'Sun, 06 Nov 1994 08:49:37 GMTx')]:
    write('http_args', 'cond_' + name, b'\4' + s.encode())

# --- move_body: the JSON body
moves = {
    'rename': {'from': 'file', 'to': 'new'},
    'overwrite': {'from': 'file', 'to': 'dir/file', 'overwrite': True},
    'exists': {'from': 'file', 'to': 'dir/file'},
    'from_outside': {'from': '../secret', 'to': 'stolen'},
    'to_abs_link': {'from': 'file', 'to': 'abs/x'},
    'to_up': {'from': 'file', 'to': 'up/x', 'overwrite': True},
    'from_link': {'from': 'dotdot', 'to': 'd2'},
    'root': {'from': '.', 'to': 'x'},
    'into_itself': {'from': 'dir', 'to': 'dir/sub/x'},
    'over_root': {'from': 'file', 'to': '/', 'overwrite': True},
    'absolute': {'from': '/file', 'to': '/new/deep/f'},
    'not_bool': {'from': 'a', 'to': 'b', 'overwrite': 1},
    'not_string': {'from': 1, 'to': 'b'},
    'missing_to': {'from': 'a'},
}
for name, body in moves.items():
    write('move_body', name, json.dumps(body))
write('move_body', 'array', '[{"from": "file", "to": "x"}]')
write('move_body', 'nul_escape', '{"from": "fi\\u0000le", "to": "x"}')
write('move_body', 'escapes', '{"from": "\\u0066ile", "to": "\\ud83d\\ude00"}')
write('move_body', 'duplicate_key', '{"from": "file", "to": "x", "to": "up/y"}')
write('move_body', 'trailing', '{"from": "file", "to": "x"} {}')
write('move_body', 'deep', '[' * 3000 + ']' * 3000)

# --- grpc_requests: type byte, then the message (protobuf wire format)
def varint(n):
    out = b''
    while True:
        b = n & 0x7f
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def vf(field, n):  # varint field
    return varint(field << 3) + varint(n & 0xffffffffffffffff)


def lf(field, data):  # length-delimited field
    data = data.encode() if isinstance(data, str) else data
    return varint(field << 3 | 2) + varint(len(data)) + data


def entry(k, v):
    return lf(1, k) + lf(2, v)


P_START, P_EXEC, P_STDIN, P_SIGNAL, P_RESIZE = range(5)
S_SPAWN, S_RUN, S_LIST, S_GET, S_ATTACH, S_WAIT, S_SIGNAL, S_STDIN, S_RESIZE, S_REMOVE = range(5, 15)
H_CHECK, R_INFO = 15, 16

config = lf(1, 'sh') + lf(1, '-c') + lf(1, 'echo hi') + lf(2, entry('A', 'b')) + lf(3, 'dir')
spec = (lf(1, 'sleep') + lf(1, '1') + lf(2, entry('K', 'v')) + lf(2, entry('K', 'w')) +
        lf(3, 'dir') + lf(4, 'web') + vf(5, 1) + lf(6, vf(1, 24) + vf(2, 80)) + vf(7, 5000) +
        vf(8, 100) + lf(9, vf(1, 1000) + vf(2, 1000) + lf(3, varint(10) + varint(20))) +
        lf(10, lf(1, 'nofile') + vf(2, 64) + vf(3, 128)) + lf(11, vf(1, 1 << 26) + vf(2, 64)))
grpc = [
    ('start', P_START, lf(1, config) + lf(2, vf(1, 80) + vf(2, 24))),
    ('start_no_config', P_START, b''),
    ('start_cwd_escape', P_START, lf(1, lf(1, 'ls') + lf(3, '../..'))),
    ('start_cwd_link', P_START, lf(1, lf(1, 'ls') + lf(3, 'abs'))),
    ('start_cwd_absin', P_START, lf(1, lf(1, 'ls') + lf(3, 'absin'))),
    ('execute', P_EXEC, lf(1, config)),
    ('execute_bad_utf8', P_EXEC, lf(1, lf(1, b'\xc0\xaf') + lf(3, 'dir'))),
    ('execute_surrogate', P_EXEC, lf(1, lf(1, 'ls') + lf(2, entry('X', b'\xed\xa0\x80')))),
    ('execute_pwd', P_EXEC, lf(1, lf(1, 'pwd') + lf(2, entry('PWD', '/elsewhere')))),
    ('execute_empty_command', P_EXEC, lf(1, lf(3, 'dir'))),
    ('stdin_input', P_STDIN, vf(1, 3) + lf(2, b'data\n')),
    ('stdin_eof', P_STDIN, vf(1, 3) + lf(3, b'')),
    ('signal', P_SIGNAL, vf(1, 3) + vf(2, 15)),
    ('signal_unknown', P_SIGNAL, vf(1, 3) + vf(2, 99)),
    ('resize', P_RESIZE, vf(1, 3) + vf(2, 80) + vf(3, 24)),
    ('resize_big', P_RESIZE, vf(1, 3) + vf(2, 1 << 20) + vf(3, 24)),
    ('spawn', S_SPAWN, lf(1, spec)),
    ('spawn_no_spec', S_SPAWN, b''),
    ('spawn_bad_rlimit', S_SPAWN, lf(1, lf(1, 'x') + lf(10, lf(1, 'nosuch') + vf(2, 1)))),
    ('spawn_soft_above_hard', S_SPAWN, lf(1, lf(1, 'x') + lf(10, lf(1, 'cpu') + vf(2, 9) + vf(3, 3)))),
    ('spawn_infinity', S_SPAWN, lf(1, lf(1, 'x') + lf(10, lf(1, 'core') + vf(2, (1 << 64) - 1)))),
    ('spawn_bad_tag', S_SPAWN, lf(1, lf(1, 'x') + lf(4, b'\xff'))),
    ('spawn_unpacked_groups', S_SPAWN, lf(1, lf(1, 'x') + lf(9, vf(3, 1) + vf(3, 2)))),
    ('run', S_RUN, lf(1, spec) + lf(2, b'input') + vf(3, 4096)),
    ('list', S_LIST, lf(1, 'web')),
    ('list_bad_utf8', S_LIST, lf(1, b'\xf4\x90\x80\x80')),
    ('get', S_GET, vf(1, 1)),
    ('get_negative', S_GET, vf(1, -1)),
    ('attach', S_ATTACH, vf(1, 1) + vf(2, 100) + vf(3, 5) + vf(4, 1) + vf(6, 1)),
    ('wait', S_WAIT, vf(1, 2)),
    ('signal_tree', S_SIGNAL, vf(1, 2) + vf(2, 9) + vf(3, 2)),
    ('stdin_data_eof', S_STDIN, vf(1, 2) + lf(2, b'x') + vf(3, 1)),
    ('resize_size', S_RESIZE, vf(1, 2) + lf(2, vf(1, 24) + vf(2, 80))),
    ('remove', S_REMOVE, vf(1, 2)),
    ('unknown_fields', S_REMOVE, vf(1, 2) + vf(99, 7) + lf(100, b'extra')),
    ('truncated', S_SPAWN, lf(1, spec)[:-3]),
    ('health', H_CHECK, lf(1, 'sandboxd.v1.Processes')),
    ('reflection', R_INFO, lf(1, 'localhost') + lf(4, 'sandboxd.v1.Processes')),
    ('reflection_file', R_INFO, lf(3, 'sandboxd/v1/processes.proto')),
    ('reflection_list', R_INFO, lf(7, '')),
    ('reflection_extensions', R_INFO, lf(6, '.sandboxd.v1.ProcessSpec')),
    ('reflection_extension', R_INFO, lf(5, lf(1, 'sandboxd.v1.ProcessSpec') + vf(2, 100))),
    ('reflection_unknown', R_INFO, lf(4, 'no.such.Symbol')),
    ('reflection_long_name', R_INFO, lf(4, '\u00e9' * 200)),  # cut inside a character before
    ('reflection_bad_host', R_INFO, lf(1, b'\xe2\x82') + lf(7, '')),
    ('reflection_none', R_INFO, lf(1, 'localhost')),
    # A NUL in a string: protobuf-c hands it over cut there ("touch x\0y" ran "touch x")
    ('execute_nul_arg', P_EXEC, lf(1, lf(1, 'sh') + lf(1, '-c') + lf(1, 'touch x\0; y'))),
    ('execute_nul_env_key', P_EXEC, lf(1, lf(1, 'env') + lf(2, entry('A\0B', '1')))),
    ('execute_nul_env_value', P_EXEC, lf(1, lf(1, 'env') + lf(2, entry('A', 'x\0y')))),
    ('execute_nul_cwd', P_EXEC, lf(1, lf(1, 'pwd') + lf(3, 'dir\0/../..'))),
    ('execute_nul_cwd_replaced', P_EXEC, lf(1, lf(1, 'pwd') + lf(3, 'a\0b') + lf(3, 'dir'))),
    ('start_nul_arg', P_START, lf(1, lf(1, 'ls\0') + lf(1, '-l'))),
    ('spawn_nul_arg', S_SPAWN, lf(1, lf(1, 'sleep') + lf(1, '1\0000'))),
    ('spawn_nul_tag', S_SPAWN, lf(1, lf(1, 'true') + lf(4, 'web\0x'))),
    ('run_nul_env_value', S_RUN, lf(1, lf(1, 'env') + lf(2, entry('K', '\0')))),
    ('run_nul_rlimit', S_RUN, lf(1, lf(1, 'x') + lf(10, lf(1, 'nofile\0') + vf(2, 64)))),
    ('list_nul_tag', S_LIST, lf(1, 'web\0')),
    ('health_nul', H_CHECK, lf(1, 'sandboxd.v1.Processes\0')),
]
for name, t, msg in grpc:
    write('grpc_requests', name, bytes([t]) + msg)

# --- http_requests: byte 0 (bit 0: the server wants "Authorization: Bearer fuzz-token"; bits
# 1-7 seed the write sizes, 0 for one write), then what the client sends
NOAUTH, AUTH, SMALL_WRITES = 0, 1, 0x2a


def req(method, target, headers=(), body=b'', version='HTTP/1.1'):
    head = f'{method} {target} {version}\r\nHost: x\r\n'
    for h in headers:
        head += h + '\r\n'
    if body and not any(h.lower().startswith(('content-length', 'transfer-encoding'))
                        for h in headers):
        head += f'Content-Length: {len(body)}\r\n'
    return head.encode() + b'\r\n' + (body if isinstance(body, bytes) else body.encode())


CHUNKED = ('Transfer-Encoding: chunked',)
MP = ('Content-Type: multipart/form-data; boundary=b',)
MP_FILE = b'--b\r\nContent-Disposition: form-data; name="file"; filename="f"\r\n\r\n'
http = [
    ('get_file', NOAUTH, req('GET', '/v1/files/file')),
    ('get_dir', NOAUTH, req('GET', '/v1/files/dir')),
    ('get_range', NOAUTH, req('GET', '/v1/files/file', ['Range: bytes=1-3'])),
    ('get_range_past', NOAUTH, req('GET', '/v1/files/file', ['Range: bytes=100-'])),
    ('head_file', NOAUTH, req('HEAD', '/v1/files/file') + req('GET', '/v1/health')),
    ('head_missing', NOAUTH, req('HEAD', '/v1/files/nope') + req('GET', '/v1/files/nope')),
    ('get_dotdot', NOAUTH, req('GET', '/v1/files/../secret')),
    ('get_escaped_dotdot', NOAUTH, req('GET', '/v1/files/%2e%2e/secret')),
    ('get_nul', NOAUTH, req('GET', '/v1/files/file%00.txt')),
    ('get_up_link', SMALL_WRITES, req('GET', '/v1/files/up/secret')),
    ('get_abs_link', NOAUTH, req('GET', '/v1/files/abs/')),
    ('get_tar', NOAUTH, req('GET', '/v1/files/dir?archive=tar')),
    ('stat', NOAUTH, req('GET', '/v1/stat/dotdot')),
    ('put', SMALL_WRITES, req('PUT', '/v1/files/new/file?mode=0600', body='hello')),
    ('put_chunked', NOAUTH, req('PUT', '/v1/files/c', CHUNKED, b'5\r\nhello\r\n0\r\n\r\n')),
    ('put_chunked_cut', NOAUTH, req('PUT', '/v1/files/c', CHUNKED, b'5\r\nhel')),
    ('put_chunked_bad', NOAUTH, req('PUT', '/v1/files/c', CHUNKED, b'zz\r\nhello\r\n0\r\n\r\n')),
    ('put_cut', NOAUTH, req('PUT', '/v1/files/c', ['Content-Length: 100'], b'only some')),
    ('put_abs', NOAUTH, req('PUT', '/v1/files/abs/escape', body='x')),
    ('put_dir', NOAUTH, req('PUT', '/v1/files/dir', body='x')),
    ('put_mode_bad', NOAUTH, req('PUT', '/v1/files/m?mode=9999', body='x')),
    ('put_multipart', NOAUTH, req('PUT', '/v1/files/mp', [
        'Content-Type: multipart/form-data; boundary=b'],
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="f"\r\n\r\ndata\r\n--b--\r\n')),
    # Multipart forms that are not whole: refused, nothing written (issue 16).
    ('put_multipart_no_close', NOAUTH, req('PUT', '/v1/files/file', MP,
        MP_FILE + b'0123456789abcdefghijklmnopqr')),
    ('put_multipart_after_delim', NOAUTH, req('PUT', '/v1/files/mp', MP,
        MP_FILE + b'data\r\n--b\r\n')),
    ('put_multipart_two_files', SMALL_WRITES, req('PUT', '/v1/files/file', MP,
        MP_FILE + b'one\r\n' + MP_FILE + b'two\r\n--b--\r\n')),
    ('put_multipart_no_name', NOAUTH, req('PUT', '/v1/files/mp', MP,
        b'--b\r\nContent-Type: text/plain\r\n\r\nx\r\n' + MP_FILE + b'data\r\n--b--')),
    ('put_multipart_junk', NOAUTH, req('PUT', '/v1/files/mp', MP,
        MP_FILE + b'data\r\n--bjunk\r\n--b--')),
    ('put_multipart_chunked_cut', SMALL_WRITES, req('PUT', '/v1/files/file', MP + CHUNKED,
        b'%x\r\n' % len(MP_FILE + b'data') + MP_FILE + b'data\r\n')),
    ('put_multipart_whole_then_get', NOAUTH, req('PUT', '/v1/files/mp', MP,
        b'pre\r\n--b\r\nContent-Disposition: form-data; name=a\r\n\r\n1\r\n' + MP_FILE +
        b'd\r\n--\r\n--b--\r\nepilogue') + req('GET', '/v1/files/mp')),
    # Conditional and partial downloads.
    ('get_ranges', NOAUTH, req('GET', '/v1/files/file', ['Range: bytes=0-1, 3-4,-1'])),
    ('head_ranges', NOAUTH, req('HEAD', '/v1/files/file', ['Range: bytes=0-0,2-2']) +
     req('GET', '/v1/health')),
    ('get_ranges_none', NOAUTH, req('GET', '/v1/files/file', ['Range: bytes=50-,60-70'])),
    ('get_ranges_overlap', NOAUTH, req('GET', '/v1/files/file', ['Range: bytes=0-,0-'])),
    ('get_if_none_match', NOAUTH, req('GET', '/v1/files/file', ['If-None-Match: *']) +
     req('GET', '/v1/files/file', ['If-None-Match: W/"x", "y"'])),
    ('get_if_modified_since', NOAUTH, req('GET', '/v1/files/file',
        ['If-Modified-Since: Fri, 31 Dec 9999 23:59:59 GMT']) + req('HEAD', '/v1/files/file',
        ['If-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT'])),
    ('get_if_range', NOAUTH, req('GET', '/v1/files/file', ['Range: bytes=1-2',
        'If-Range: "nope"']) + req('GET', '/v1/files/file', ['Range: bytes=1-2,4-4',
        'If-Range: Sun, 06 Nov 1994 08:49:37 GMT'])),
    ('put_tar_garbage', NOAUTH, req('PUT', '/v1/files/dir?archive=tar', body=b'\0' * 512 + b'x')),
    ('delete', NOAUTH, req('DELETE', '/v1/files/dir?recursive=true')),
    ('delete_nonempty', NOAUTH, req('DELETE', '/v1/files/dir')),
    ('delete_root', NOAUTH, req('DELETE', '/v1/files/?recursive=1')),
    ('mkdir', NOAUTH, req('PUT', '/v1/dirs/a/b?parents=true')),
    ('move', NOAUTH, req('POST', '/v1/move', body='{"from":"file","to":"dir/moved"}')),
    ('move_out', NOAUTH, req('POST', '/v1/move', body='{"from":"file","to":"up/x"}')),
    ('move_bad_json', NOAUTH, req('POST', '/v1/move', body='{"from":')),
    ('metadata', NOAUTH, req('GET', '/v1/metadata')),
    ('metrics', NOAUTH, req('GET', '/metrics')),
    ('readyz_healthz', NOAUTH, req('GET', '/readyz') + req('GET', '/healthz')),
    ('method_odd', NOAUTH, req('BREW', '/v1/files/file')),
    ('method_lower', NOAUTH, req('get', '/v1/files/file')),
    ('no_route', NOAUTH, req('GET', '/v2/x')),
    ('http10', NOAUTH, req('GET', '/v1/health', version='HTTP/1.0')),
    ('http2_version', NOAUTH, req('GET', '/v1/health', version='HTTP/2.0')),
    ('garbage', NOAUTH, b'\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03'),
    ('no_host', NOAUTH, b'GET /v1/health HTTP/1.1\r\n\r\n'),
    ('bare_lf', NOAUTH, b'GET /v1/health HTTP/1.1\nHost: x\n\n'),
    ('header_space', NOAUTH, b'GET /v1/health HTTP/1.1\r\nHost : x\r\n\r\n'),
    ('long_header', NOAUTH, req('GET', '/v1/health', ['X: ' + 'a' * 60000])),
    ('expect_continue', NOAUTH, req('PUT', '/v1/files/e', ['Expect: 100-continue'], 'body')),
    ('pipelined', SMALL_WRITES, req('PUT', '/v1/files/p', body='1') + req('GET', '/v1/files/p') +
     req('DELETE', '/v1/files/p') + req('GET', '/v1/files/p')),
    ('auth_none', AUTH, req('GET', '/v1/files/file')),
    ('auth_ok', AUTH, req('GET', '/v1/files/file', ['Authorization: Bearer fuzz-token'])),
    ('auth_wrong', AUTH, req('GET', '/v1/files/file', ['Authorization: Bearer nope'])),
    ('auth_twice', AUTH, req('GET', '/v1/files/file', ['Authorization: Bearer fuzz-token',
                                                       'Authorization: Bearer fuzz-token'])),
    ('auth_expect', AUTH, req('PUT', '/v1/files/e', ['Expect: 100-continue'], 'body')),
    ('auth_health', AUTH, req('GET', '/v1/health')),
]
for name, flags, data in http:
    write('http_requests', name, bytes([flags]) + data)

# http_requests, the refusals of malformed heads the server makes on every request (the gate
# makes them on a connection's first head; here the fuzz target hands the socket over directly):
# after a good request on the same connection, as a client keeping its connection alive sends.
OK = req('GET', '/healthz')
strict = [
    ('strict_nul_value', b'GET /v1/health HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n'),
    ('strict_two_hosts', b'GET /v1/health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n'),
    ('strict_bad_escape', req('GET', '/v1/files/%zz')),
    ('strict_bad_escape_query', req('GET', '/v1/files/file?a=%g0')),
    ('strict_cl_te', req('PUT', '/v1/files/s', ['Content-Length: 3', 'Transfer-Encoding: chunked'],
                         b'3\r\nabc\r\n0\r\n\r\n')),
    ('strict_two_cl', req('PUT', '/v1/files/s', ['Content-Length: 3', 'Content-Length: 4'],
                          b'abcd')),
    ('strict_te_gzip', req('PUT', '/v1/files/s', ['Transfer-Encoding: gzip'], b'abc')),
    ('strict_te_http10', req('PUT', '/v1/files/s', CHUNKED, b'3\r\nabc\r\n0\r\n\r\n',
                             version='HTTP/1.0')),
    ('strict_bare_cr', b'GET /v1/health HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n'),
    ('strict_absolute_form', req('GET', 'http://sandbox/v1/health')),
]
for name, data in strict:
    write('http_requests', name, bytes([NOAUTH]) + data)
    write('http_requests', name + '_later', bytes([NOAUTH]) + OK + data)

# --- http_head: a request head as the gate peeks it (any bytes; the head ends at its empty line)
heads = [
    ('ok', req('GET', '/v1/health')),
    ('ok_absolute', req('GET', 'http://x:1/v1/files/a?b=%20')),
    ('ok_http10', b'GET /healthz HTTP/1.0\r\n\r\n'),
    ('ok_leading_crlf', b'\r\n\r\n' + req('GET', '/healthz')),
    ('ok_options_star', req('OPTIONS', '*')),
    ('ok_ipv6_host', b'GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n'),
    ('ok_put_chunked', req('PUT', '/v1/files/a', CHUNKED)),
    ('garbage', b'GARBAGE\r\n\r\n'),
    ('double_space', b'GET  / HTTP/1.1\r\nHost: x\r\n\r\n'),
    ('version_9', b'GET / HTTP/9.9\r\nHost: x\r\n\r\n'),
    ('bare_lf', b'GET / HTTP/1.1\nHost: x\n\n'),
    ('bare_cr', b'GET / HTTP/1.1\r\nHost: x\r\nX: a\rb\r\n\r\n'),
    ('nul_value', b'GET / HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n'),
    ('control_value', b'GET / HTTP/1.1\r\nHost: x\r\nX: a\x01b\r\n\r\n'),
    ('space_colon', b'GET / HTTP/1.1\r\nHost : x\r\n\r\n'),
    ('folded', b'GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n'),
    ('no_host', b'GET / HTTP/1.1\r\n\r\n'),
    ('two_hosts', b'GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n'),
    ('bad_host', b'GET / HTTP/1.1\r\nHost: a|b\r\n\r\n'),
    ('bad_escape', req('GET', '/a%zz')),
    ('bad_authority', req('GET', 'http://a@b/')),
    ('cl_te', req('PUT', '/a', ['Content-Length: 1', 'Transfer-Encoding: chunked'])),
    ('two_cl', req('PUT', '/a', ['Content-Length: 1', 'Content-Length: 1'])),
    ('cl_nan', req('PUT', '/a', ['Content-Length: 1x'])),
    ('te_gzip', req('PUT', '/a', ['Transfer-Encoding: gzip, chunked'])),
    ('te_http10', b'PUT /a HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n'),
]
for name, data in heads:
    write('http_head', name, data)


# --- ws_frame: a chunk-size byte, then a client's frames (masked, as clients must send them)
def ws(b0, payload=b'', mask=b'\x37\xfa\x21\x3d', length=None, masked=True):
    n = len(payload) if length is None else length
    h = bytes([b0])
    m = 0x80 if masked else 0
    if n < 126:
        h += bytes([m | n])
    elif n < 65536:
        h += bytes([m | 126]) + struct.pack('>H', n)
    else:
        h += bytes([m | 127]) + struct.pack('>Q', n)
    if not masked:
        return h + payload
    return h + mask + bytes(c ^ mask[i % 4] for i, c in enumerate(payload))


frames = [
    ('hello', 0, ws(0x81, b'Hello')),
    ('binary_keys', 2, ws(0x82, b'ls -l\r')),
    ('resize', 5, ws(0x81, b'{"type":"resize","cols":120,"rows":40}')),
    ('fragments_ping', 1, ws(0x01, b'Hel') + ws(0x89, b'p') + ws(0x00, b'l') + ws(0x80, b'o')),
    ('close_code', 3, ws(0x88, b'\x03\xe8bye')),
    ('close_empty', 0, ws(0x88)),
    ('len16', 7, ws(0x82, b'x' * 300)),
    ('len64', 255, ws(0x82, b'y' * 70000)),
    ('too_big', 0, ws(0x82, length=5000)),
    ('unmasked', 0, ws(0x82, b'abc', masked=False)),
    ('reserved', 0, ws(0xc2, b'abc')),
    ('opcode3', 0, ws(0x83, b'abc')),
    ('bad_utf8', 0, ws(0x81, b'\xc3\x28')),
    ('close_1005', 0, ws(0x88, b'\x03\xed')),
    ('ping_126', 0, ws(0x89, b'p' * 126)),
    ('cont_first', 0, ws(0x80, b'a')),
    ('nested_text', 0, ws(0x01, b'a') + ws(0x81, b'b')),
    ('len16_short', 0, b'\x82\xfe\x00\x05mask'),
]
for name, chunk, data in frames:
    write('ws_frame', name, bytes([chunk]) + data)


# --- connect: part byte (% 4: envelopes, headers, error JSON, end of stream), then per part
def env(flags, payload):
    return struct.pack('>BI', flags, len(payload)) + payload


start = b'{"process":{"cmd":"/bin/bash","args":["-l","-c","ls"]},"stdin":false}'
streams = [
    ('env_start', 64, 3, env(0, start)),
    ('env_input', 64, 5, env(0, b'{"start":{"process":{"pid":7}}}') +
     env(0, b'{"data":{"input":{"stdin":"aGk="}}}') + env(0, b'{"keepalive":{}}')),
    ('env_end', 8, 1, env(0, b'') + env(2, b'{}')),
    ('env_end_error', 64, 2,
     env(2, b'{"error":{"code":"not_found","message":"process with pid 7 not found"}}')),
    ('env_compressed', 8, 1, env(1, b'\x1f\x8b')),
    ('env_flags', 8, 1, env(4, b'x')),
    ('env_too_big', 1, 1, env(0, b'12345')),
    ('env_huge_len', 255, 1, b'\x00\xff\xff\xff\xff'),
    ('env_short_prefix', 8, 1, b'\x00\x00\x00'),
    ('env_short_msg', 8, 7, b'\x00\x00\x00\x00\x09abc'),
    ('env_many_small', 4, 9, b''.join(env(0, bytes([i])) for i in range(40))),
]
for name, quarter_max, seed, data in streams:
    write('connect', name, bytes([0, quarter_max, seed]) + data)
headers = [
    ('hdr_json', 'application/json'), ('hdr_proto', 'application/proto'),
    ('hdr_stream_json', 'application/connect+json'),
    ('hdr_stream_proto', 'application/connect+proto'),
    ('hdr_charset', 'application/json; charset=utf-8'),
    ('hdr_charset_quoted', 'Application/Connect+JSON;charset="UTF-8"'),
    ('hdr_proto_charset', 'application/proto; charset=utf-8'),
    ('hdr_grpc', 'application/grpc+proto'), ('hdr_other_param', 'application/json; q=1'),
    ('hdr_timeout', '60000'), ('hdr_timeout_long', '12345678901'), ('hdr_timeout_sign', '+5'),
    ('hdr_version', '1'), ('hdr_blanks', ' \tapplication/json\t '),
]
for name, value in headers:
    write('connect', name, b'\x01' + value.encode())
errors = [
    ('err_not_found', 2, 5, 0, [b"path '/home/user/x' does not exist"]),
    ('err_quotes', 2, 3, 0, [b'bad "name" \\ and \n newline \x01']),
    ('err_bad_utf8', 2, 13, 0, [b'caf\xc3\xa9 \xff\xfe \xed\xa0\x80']),
    ('err_no_message', 2, 14, 0, [b'']),
    ('err_details', 2, 9, 2, [b'failed', b'google.rpc.ErrorInfo', b'foo', b'x.Y', b'fooba']),
    ('err_bad_type', 2, 9, 1, [b'm', b'a b', b'v']),
    ('err_too_many', 2, 9, 9, [b'm'] + [b't', b'v'] * 9),
    ('err_code_0', 2, 0, 0, [b'ok?']), ('err_code_17', 2, 17, 0, [b'no such code']),
    ('err_code_neg', 2, 0xff, 0, [b'negative']),
    ('err_long', 2, 2, 0, [b'\xc3\xa9' * 2100]),
    ('end_deadline', 3, 4, 0, [b'command timed out']),
    ('end_details', 3, 10, 1, [b'aborted', b'a.B', b'\x08\x01']),
]
for name, part, code, ndetails, strings in errors:
    write('connect', name, bytes([part, code, ndetails]) + b'\x00'.join(strings))

# --- pbjson: a byte choosing the message type (the table in fuzz_pbjson.c), then the JSON text
PB = {'pty': 0, 'config': 2, 'start_req': 7, 'update_req': 8, 'event': 10, 'end_event': 13,
      'start_resp': 15, 'send_input': 17, 'input': 19, 'stream_input': 20, 'signal': 25,
      'selector': 30, 'move_req': 31, 'stat_resp': 38, 'entry': 39, 'list_req': 41,
      'list_resp': 42, 'fs_event': 44, 'watch_resp': 45, 'watcher_events': 51, 'timestamp': 54,
      'all': 55}
ENTRY = ('{"name":"a.txt","type":"FILE_TYPE_FILE","path":"/home/user/a.txt","size":"12",'
         '"mode":420,"permissions":"-rw-r--r--","owner":"user","group":"user",'
         '"modifiedTime":"2026-12-02T10:00:00.120Z","metadata":{"k":"v"}}')
pbjson = [
    ('start', 'start_req', '{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"],'
     '"envs":{"A":"1","B":""},"cwd":"/home/user"},"stdin":false,"tag":"t"}'),
    ('start_pty', 'start_req', '{"process":{"cmd":"/bin/bash"},"pty":{"size":{"cols":80,'
     '"rows":"24"}}}'),
    ('start_snake', 'start_req', '{"process":{"cmd":"x","args":null},"tag":null,"stdin":true}'),
    ('update_pty', 'update_req', '{"process":{"pid":7},"pty":{"size":{"cols":1.0,"rows":"1e2"}}}'),
    ('data', 'start_resp', '{"event":{"data":{"stdout":"aGkK"}}}'),
    ('data_url', 'start_resp', '{"event":{"data":{"pty":"-_8"}}}'),
    ('end', 'start_resp', '{"event":{"end":{"exitCode":-1,"exited":true,"status":"signal: killed",'
     '"error":""}}}'),
    ('keepalive', 'event', '{"keepalive":{}}'),
    ('two_events', 'event', '{"start":{"pid":1},"end":{}}'),
    ('null_member', 'event', '{"start":null,"data":{"stderr":"QQ=="}}'),
    ('end_snake', 'end_event', '{"exit_code":2,"exitCode":3}'),
    ('signal', 'signal', '{"process":{"pid":12},"signal":"SIGNAL_SIGKILL"}'),
    ('signal_number', 'signal', '{"process":{"tag":"x"},"signal":15}'),
    ('signal_unknown', 'signal', '{"signal":"SIGNAL_SIGHUP","other":[1,{"a":null}]}'),
    ('send_input', 'send_input', '{"process":{"tag":"x"},"input":{"stdin":"aGkK"}}'),
    ('input_bad', 'input', '{"stdin":"+-=="}'),
    ('stream_start', 'stream_input', '{"start":{"process":{"pid":"4294967295"}}}'),
    ('selector_range', 'selector', '{"pid":4294967296}'),
    ('config_escapes', 'config', '{"cmd":"a\\"b\\\\c\\n\\u0001\\u00e9\\ud83d\\ude00","args":["",'
     '"\\/"],"envs":{"\\u00e9":"x"}}'),
    ('pty_fraction', 'pty', '{"size":{"cols":1.5}}'),
    ('move', 'move_req', '{"source":"/a","destination":"/b"}'),
    ('stat', 'stat_resp', '{"entry":' + ENTRY + '}'),
    ('entry_link', 'entry', '{"type":3,"symlinkTarget":"/x","size":-5,'
     '"modified_time":"0001-01-01T00:00:00Z"}'),
    ('entry_ts_offset', 'entry', '{"modifiedTime":"9999-12-31T23:59:59.999999999-01:00"}'),
    ('list', 'list_req', '{"path":"/home/user","depth":1}'),
    ('list_resp', 'list_resp', '{"entries":[' + ENTRY + ',{"name":"b"}]}'),
    ('fs_event', 'fs_event', '{"name":"a","type":"EVENT_TYPE_WRITE","entry":{}}'),
    ('watch_start', 'watch_resp', '{"start":{}}'),
    ('watcher_events', 'watcher_events', '{"events":[{"name":"a","type":"EVENT_TYPE_CREATE"},'
     '{"type":5}]}'),
    ('timestamp', 'timestamp', '"2026-02-28T23:59:60Z"'),
    ('timestamp_ok', 'timestamp', '"2024-02-29T12:00:00.5+05:30"'),
    ('not_object', 'move_req', '[1,2]'),
    ('all_scalars', 'all', '{"i32":-5,"s32":"-6","sf32":7,"u32":4294967295,"f32":"8","i64":"-9",'
     '"s64":10,"sf64":"-11","u64":"18446744073709551615","f64":"12","fl":0.1,"db":"1e-7",'
     '"b":true,"s":"x","by":"AQ","color":"COLOR_BLUE","oFl":"-0"}'),
    ('all_lists', 'all', '{"rI64":["1",2],"rFl":["NaN","-Infinity",1.5e-45],"rB":[true],'
     '"rBy":["","AQID"],"rColor":["COLOR_RED",-2,"COLOR_GREEN",7],"rTs":["1970-01-01T00:00:01Z"]}'),
    ('all_maps', 'all', '{"mI32":{"10":"a","-1":"b","+02":"c"},"mU64":{"18446744073709551615":'
     '{"i32":1}},"mBool":{"true":1,"false":0},"mS64":{"-3":"AA=="},"mColor":{"a":"COLOR_RED",'
     '"b":"NOPE","c":5}}'),
    ('all_map_dup', 'all', '{"mI32":{"1":"a","01":"b"}}'),
    ('all_nested', 'all', '{"child":{"child":{"oAll":{"oAll":{"mU64":{"1":{"child":{}}}}}}}}'),
    ('all_floats', 'all', '{"fl":3.4028234e38,"db":-1.7976931348623157e308,"oFl":1e-7}'),
    ('all_wrappers', 'all', '{"wI32":0,"wU64":"5","wS":"","wBy":"AQ==","wB":false,'
     '"rWDb":[1.5,"NaN"],"dur":null}'),
    ('all_duration', 'all', '{"dur":"1.5s"}'),
]
for name, t, text in pbjson:
    write('pbjson', name, bytes([PB[t]]) + text.encode())

# --- h2c_resp: an HTTP/1.1 response as libmicrohttpd writes it on an h2c stream's socketpair;
# the first byte: bit 0 the request was HEAD, the rest the size of the pieces fed (plus 1)
H = 'HTTP/1.1 200 OK\r\nDate: Wed, 02 Dec 2026 13:00:00 GMT\r\n'
h2c_resp = [
    ('length', 0x00, H + 'Content-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello'),
    ('length_pieces', 0x06, H + 'Content-Length: 11\r\n\r\nhello world'),
    ('length_zero', 0x00, 'HTTP/1.1 204 No Content\r\n\r\n'),
    ('chunked', 0x00, H + 'Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n1;ext=1\r\n!\r\n0\r\n\r\n'),
    ('chunked_bytes', 0x00, H + 'Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n'),
    ('chunked_connect', 0x14, H + 'Content-Type: application/connect+json\r\n'
     'Transfer-Encoding: chunked\r\n\r\n7\r\n\x00\x00\x00\x00\x02{}\r\n0\r\n\r\n'),
    ('until_eof', 0x00, 'HTTP/1.0 200 OK\r\nConnection: close\r\n\r\nrest of the stream'),
    ('head_method', 0x01, H + 'Content-Length: 100\r\n\r\n'),
    ('continue', 0x00, 'HTTP/1.1 100 Continue\r\n\r\n' + H + 'Content-Length: 2\r\n\r\nok'),
    ('switching', 0x00, 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n'),
    ('cl_and_te', 0x00, H + 'Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n'),
    ('cl_twice', 0x00, H + 'Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd'),
    ('te_gzip', 0x00, H + 'Transfer-Encoding: gzip\r\n\r\n'),
    ('bad_chunk', 0x00, H + 'Transfer-Encoding: chunked\r\n\r\nzz\r\n'),
    ('chunk_no_crlf', 0x00, H + 'Transfer-Encoding: chunked\r\n\r\n1\r\nab\r\n'),
    ('bare_lf', 0x00, 'HTTP/1.1 200 OK\nContent-Length: 0\n\n'),
    ('folded', 0x00, H + 'X-A: 1\r\n  2\r\nContent-Length: 0\r\n\r\n'),
    ('bad_status', 0x00, 'HTTP/1.1 2x0 OK\r\n\r\n'),
    ('http2_status', 0x00, 'HTTP/2 200\r\n\r\n'),
    ('cut', 0x00, H + 'Content-Length: 10\r\n\r\nabc'),
    ('huge_chunk', 0x00, H + 'Transfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nab'),
    ('many_fields', 0x00, H + ''.join(f'X-{i}: v\r\n' for i in range(70)) + '\r\n'),
]
for name, b0, text in h2c_resp:
    write('h2c_resp', name, bytes([b0]) + text.encode('latin-1'))
