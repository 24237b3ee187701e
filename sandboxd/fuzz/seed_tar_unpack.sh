#!/usr/bin/env bash
# Writes the seed archives of corpus/tar_unpack/ (already committed: rerun only to change them),
# made with GNU tar and Python's tarfile. Each is cut after its two end blocks (no record
# padding), and 4 bytes are appended: fuzz_tar_unpack.c reads them as the chunk sizes.
set -euo pipefail
out=$(cd "$(dirname "$0")" && pwd)/corpus/tar_unpack
work=$(mktemp -d -t sbx-seed.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
cd "$work"

GTAR=(tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@1600000000 -b1)

# A small tree for GNU tar.
mkdir -p tree/dir/sub tree/deep/"$(printf 'd%.0s' {1..60})"/"$(printf 'e%.0s' {1..60})"
printf 'hello\n' >tree/dir/file
printf 'x%.0s' {1..700} >tree/dir/sub/big
printf 'deep\n' >tree/deep/"$(printf 'd%.0s' {1..60})"/"$(printf 'e%.0s' {1..60})"/f
ln -s file tree/dir/link
ln -s ../dir/sub tree/deep/rel
ln tree/dir/file tree/dir/hard
printf 'long\n' >tree/dir/"$(printf 'n%.0s' {1..120})"
ln -s "$(printf 't%.0s' {1..120})" tree/dir/longlink
(cd tree && "${GTAR[@]}" --format=ustar -cf ../ustar.tar dir/file dir/sub dir/link dir/hard deep)
(cd tree && "${GTAR[@]}" --format=gnu -cf ../gnu_long.tar .)
(cd tree && "${GTAR[@]}" --format=pax --pax-option=delete=atime,delete=ctime -cf ../pax_gnutar.tar dir)
(cd tree && "${GTAR[@]}" --format=v7 -cf ../v7.tar dir/file dir/sub)
(cd tree && "${GTAR[@]}" --format=gnu -cf ../hardlinks.tar dir/file dir/hard)

# The rest from Python: escapes, odd fields, and a truncated archive.
/usr/bin/python3 - <<'EOF'
import io, tarfile

def arch(path, fmt, entries, **kw):
    with tarfile.open(path, 'w', format=fmt, **kw) as t:
        for e in entries:
            e(t)

def f(name, data=b'data', **kw):
    def add(t):
        i = tarfile.TarInfo(name); i.size = len(data); i.mode = 0o644; i.mtime = 1600000000
        for k, v in kw.items(): setattr(i, k, v)
        t.addfile(i, io.BytesIO(data))
    return add

def l(name, target, type=tarfile.SYMTYPE, **kw):
    return f(name, b'', type=type, linkname=target, **kw)

P, G = tarfile.PAX_FORMAT, tarfile.GNU_FORMAT
arch('pax_long.tar', P, [
    f('a/', b'', type=tarfile.DIRTYPE, mode=0o700),
    f('a/' + 'p' * 150 + '/f', b'pax long name'),
    l('a/l', 'x' * 150),
    f('frac', b'x', pax_headers={'mtime': '-12345.25'}),
    f('sparse', b'', pax_headers={'GNU.sparse.size': '100'}),
], pax_headers={'comment': 'a global header'})
arch('gnu_base256.tar', G, [
    f('neg', b'n', mtime=-1000000000),
    f('big', b'b', mtime=12000000000, uid=2**40),
    f('L' * 120, b'l'),
])
arch('symlinks.tar', P, [
    f('sub/', b'', type=tarfile.DIRTYPE, mode=0o755),
    l('in', 'sub'), f('in/f', b'through an inside symlink'),
    l('abs', '/tmp'), l('dot', '.'), f('./a/./b/../c', b'c'),
])
arch('escape_dotdot.tar', P, [f('good'), f('../evil'), f('after')])
arch('escape_links.tar', P, [f('up/evil'), f('abs/evil'), l('up2', '..'), f('up2/evil')])
arch('escape_hardlink.tar', P, [
    l('h2', 'up/secret', tarfile.LNKTYPE), l('h1', '../secret', tarfile.LNKTYPE),
    l('h3', '/etc/passwd', tarfile.LNKTYPE),
])
arch('types.tar', G, [
    f('fifo', b'', type=tarfile.FIFOTYPE), f('chr', b'', type=tarfile.CHRTYPE),
    f('odd', b'skipped', type=b'Z'), f('suid', b'x', mode=0o6755),
    f('d/', b'', type=tarfile.DIRTYPE, mode=0o1777), f('d/x', b'x'), f('d', b'file over dir'),
])
arch('truncated.tar', P, [f('whole', b'w' * 600), f('cut', b'c' * 2000)])
arch('escape_abs.tar', G, [f('/abs/evil')])
arch('names_target.tar', P, [f('./', b'', type=tarfile.DIRTYPE), f('a/..', b'a file over the target')])
arch('empty_link.tar', P, [l('e', '')])
arch('big_file.tar', P, [f('big', bytes(range(256)) * 275)])  # over the 64 KiB write buffer
EOF

# cut FILE: drops the record padding after the two end blocks (the truncated one: mid-entry).
cut() {
  /usr/bin/python3 - "$1" <<'EOF'
import sys
p = sys.argv[1]
data = open(p, 'rb').read().rstrip(b'\0')
end = -(-len(data) // 512) * 512 + 1024
if p == 'truncated.tar':
    end -= 1024 + 1100
with open(p, 'r+b') as fh:
    fh.truncate(end)
EOF
}

# spec FILE BYTES: appends the chunk-size bytes (printf escapes).
spec() { printf "$2" >>"$1"; }

for a in *.tar; do cut "$a"; done
spec ustar.tar '\0\0\0\0'
spec gnu_long.tar '\001\007\200\000'
spec pax_gnutar.tar '\003\377\011\201'
spec v7.tar '\000\000\000\000'
spec hardlinks.tar '\177\001\002\003'
spec pax_long.tar '\005\041\202\001'
spec gnu_base256.tar '\001\001\001\001'
spec symlinks.tar '\000\000\000\000'
spec escape_dotdot.tar '\007\007\007\007'
spec escape_links.tar '\000\000\000\000'
spec escape_hardlink.tar '\002\220\001\000'
spec types.tar '\000\000\000\000'
spec truncated.tar '\013\000\000\000'
spec escape_abs.tar '\000\000\000\000'
spec names_target.tar '\001\000\000\000'
spec empty_link.tar '\000\000\000\000'
spec big_file.tar '\377\377\377\377'
for a in *.tar; do mv "$a" "$out/${a%.tar}"; done
ls -l "$out"
