#!/bin/sh
# ddpprep --images folder end to end (docs/design.md §5.6), checked by an
# independent reader and resampler (python3) on a tree made here:
#  - PNGs of every kind (8- and 16-bit, gray, gray+alpha, palette, RGB,
#    RGBA, 1-bit gray), written with zlib and struct alone, come out exactly
#    as the source pixels after a centre crop or an exact 2x box downscale,
#    as RGB and with --channels 1 (PIL's luma); JPEGs (gray and colour, made
#    with PIL when python3 has it) within a small tolerance of PIL's decode;
#  - classes are the sorted folder names (labels 0..), hidden folders are
#    not classes, files are taken in sorted path order at any depth, other
#    files are skipped and counted in the summary line, PREFIX_classes.txt
#    names the classes;
#  - --val-frac: train + val = every image once, in order; the output is the
#    same byte for byte with 1 and with 4 --threads;
#  - bad input (missing --image-size, extra paths, flags of folder given to
#    idx, --channels 2, a missing path, a file, one class, an empty class, a
#    dangling link, a class name with a newline, a corrupt, truncated,
#    mislabelled or huge PNG, a truncated, CMYK or huge JPEG, two bad files:
#    the first; PREFIX_classes.txt not writable or not renamable) exits 2 or
#    1 with one line naming the cause and leaves no PREFIX_* file; an
#    earlier output under the same prefix stays untouched.
# In a build without libpng or libjpeg, only the refusal is checked (exit 2,
# naming the library), then the test SKIPs.
. "${top_builddir:-.}/tests/env.sh"
set -u
PREP="$top_builddir/ddpprep"
fail=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

ok() { echo "ok: $1"; }
ko() { echo "FAIL: $1"; [ -f "$dir/err" ] && sed 's/^/  | /' "$dir/err"; fail=1; }

# --build-info names both libraries, with yes or no as configure found them.
png=no jpeg=no
grep -q '^#define DDP_HAVE_PNG 1' "$top_builddir/config.h" && png=yes
grep -q '^#define DDP_HAVE_JPEG 1' "$top_builddir/config.h" && jpeg=yes
"$top_builddir/ddptrain" --build-info > "$dir/info" 2>&1
if grep -qE "^  libpng +$png" "$dir/info" && grep -qE "^  libjpeg +$jpeg" "$dir/info"; then
  ok "--build-info: libpng $png, libjpeg $jpeg"
else
  echo "FAIL: --build-info lacks 'libpng $png' or 'libjpeg $jpeg'"; sed 's/^/  | /' "$dir/info"; fail=1
fi

mkdir "$dir/one"
if [ $png = no ] || [ $jpeg = no ]; then
  "$PREP" --images folder --image-size 4 -o "$dir/bad" "$dir/one" > "$dir/out" 2>&1
  rc=$?
  if [ $rc -eq 2 ] && grep -qE "built without (libpng|libjpeg)" "$dir/out"; then
    echo "ok: a build without libpng or libjpeg refuses --images folder, naming the library"
    [ $fail = 0 ] || exit 1
    echo "SKIP: this build has no libpng or no libjpeg"; exit 77
  fi
  echo "FAIL: a build without libpng or libjpeg: exit $rc"; sed 's/^/  | /' "$dir/out"; exit 1
fi

# The tree, and expected.json: per class in label order, per file in path
# order, [label, rgb pixels HWC, gray pixels, tolerance] after a resize to 4.
python3 - "$dir" <<'PY'
import json, os, random, struct, sys, zlib
d = sys.argv[1] + "/tree"
S = 4
rnd = random.Random(11)
have_pil = True
try:
    from PIL import Image
except ImportError:
    have_pil = False

def chunk(t, data):
    return struct.pack(">I", len(data)) + t + data + struct.pack(">I", zlib.crc32(t + data))

def png(path, w, h, rgb, kind):
    """rgb: h*w (r, g, b); gray kinds use r."""
    ct, depth, plte, rows = {"rgb8": (2, 8), "rgba8": (6, 8), "gray8": (0, 8), "graya8": (4, 8),
                             "pal8": (3, 8), "rgb16": (2, 16), "gray16": (0, 16),
                             "gray1": (0, 1)}[kind] + (b"", [])
    colours = sorted(set(rgb))
    for y in range(h):
        px = rgb[y * w:(y + 1) * w]
        if kind == "rgb8": row = bytes(v for p in px for v in p)
        elif kind == "rgba8": row = bytes(v for p in px for v in p + (rnd.randrange(256),))
        elif kind == "gray8": row = bytes(p[0] for p in px)
        elif kind == "graya8": row = bytes(v for p in px for v in (p[0], rnd.randrange(256)))
        elif kind == "pal8": row = bytes(colours.index(p) for p in px)
        elif kind == "rgb16": row = b"".join(struct.pack(">H", v * 257) for p in px for v in p)
        elif kind == "gray16": row = b"".join(struct.pack(">H", p[0] * 257) for p in px)
        else:  # gray1: 0 or 255, 8 pixels a byte, most significant bit first
            bits = [1 if p[0] else 0 for p in px] + [0] * 7
            row = bytes(sum(b << (7 - i) for i, b in enumerate(bits[k:k + 8]))
                        for k in range(0, w, 8))
        rows.append(b"\0" + row)
    if kind == "pal8":
        plte = chunk(b"PLTE", bytes(v for c in colours for v in c))
    data = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ct, 0, 0, 0))
            + plte + chunk(b"IDAT", zlib.compress(b"".join(rows))) + chunk(b"IEND", b""))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, "wb").write(data)

def luma(p):
    return (19595 * p[0] + 38470 * p[1] + 7471 * p[2] + 0x8000) >> 16

def expect(w, h, rgb, ch):
    """torchvision's Resize(S) + CenterCrop(S) where the resize is none or an
    exact halving (a 2x2 box mean, halves rounded up)."""
    img = [list(p[:ch]) if ch == 3 else [luma(p)] for p in rgb]
    if min(w, h) == 2 * S:
        img = [[(sum(img[(2 * y + dy) * w + 2 * x + dx][c] for dy in (0, 1) for dx in (0, 1)) + 2) // 4
                for c in range(len(img[0]))] for y in range(h // 2) for x in range(w // 2)]
        w, h = w // 2, h // 2
    else:
        assert min(w, h) == S
    ox, oy = round((w - S) / 2), round((h - S) / 2)  # Python's round: half to even
    return [v for y in range(S) for x in range(S) for v in img[(y + oy) * w + x + ox]]

def pixels(w, h, kind):
    if kind == "gray1": return [(v, v, v) for v in (rnd.choice((0, 255)) for _ in range(w * h))]
    if kind.startswith("gray"): return [(v, v, v) for v in (rnd.randrange(256) for _ in range(w * h))]
    if kind == "pal8":
        pal = [tuple(rnd.randrange(256) for _ in range(3)) for _ in range(5)]
        return [rnd.choice(pal) for _ in range(w * h)]
    return [tuple(rnd.randrange(256) for _ in range(3)) for _ in range(w * h)]

want = {}  # class -> {relative path: [rgb, gray, tolerance]}
def add(cls, name, w, h, kind):
    rgb = pixels(w, h, kind)
    png("%s/%s/%s" % (d, cls, name), w, h, rgb, kind)
    want.setdefault(cls, {})[name] = [expect(w, h, rgb, 3), expect(w, h, rgb, 1), 0]

def add_jpeg(cls, name, w, h, gray):
    # smooth content, so that JPEG's loss stays small; compared with PIL's decode
    rgb = [(min(255, 20 + 9 * x + 3 * y), min(255, 200 - 7 * y), 90 + 5 * x) for y in range(h) for x in range(w)]
    im = Image.new("RGB", (w, h)); im.putdata(rgb)
    if gray: im = im.convert("L")
    path = "%s/%s/%s" % (d, cls, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    im.save(path, "JPEG", quality=95, subsampling=0)
    raw = Image.open(path).convert("RGB").tobytes()
    dec = [tuple(raw[i:i + 3]) for i in range(0, len(raw), 3)]
    want.setdefault(cls, {})[name] = [expect(w, h, dec, 3), expect(w, h, dec, 1), 3]

# "Zebra" < "apple" < "b_c" byte-wise (not in a case-blind order)
add("Zebra", "10.png", 4, 6, "rgb8")    # no resize, crop rows 1..4
add("Zebra", "2.png", 5, 4, "rgba8")    # crop columns round(0.5) = 0
add("Zebra", "3.PNG", 4, 4, "gray8")
add("Zebra", "4.png", 8, 14, "graya8")  # 2x to 4x7, crop rows round(1.5) = 2
add("Zebra", "5.png", 10, 8, "pal8")    # 2x to 5x4
add("Zebra", "6.png", 8, 8, "rgb16")
add("Zebra", "7.png", 6, 4, "gray16")
add("Zebra", "8.png", 12, 4, "gray1")
add("apple", "a.png", 4, 4, "rgb8")
add("apple", "sub/deeper/b.png", 8, 10, "rgb8")  # any depth, in path order
add("apple", "sub/c.png", 4, 5, "rgba8")
add("b_c", "z.png", 16, 8, "rgb8")
if have_pil:
    add_jpeg("apple", "j1.jpg", 8, 12, False)
    add_jpeg("b_c", "j2.JPEG", 8, 8, True)
    add_jpeg("b_c", "j3.jpeg", 4, 6, False)
open(d + "/README", "w").write("not a class\n")          # skipped: 1
open(d + "/apple/notes.txt", "w").write("notes\n")       # 2
open(d + "/b_c/image.gif", "wb").write(b"GIF89a")        # 3
open(d + "/b_c/NOEXT", "wb").write(b"")                  # 4
png(d + "/.hidden/x.png", 4, 4, pixels(4, 4, "rgb8"), "rgb8")  # not a class, not counted
classes = sorted(want)
out = []
for label, cls in enumerate(classes):
    for name in sorted(want[cls]):
        out.append([label] + want[cls][name])
json.dump({"classes": classes, "records": out, "pil": have_pil}, open(sys.argv[1] + "/expected.json", "w"))

# bad inputs
b = sys.argv[1] + "/badsrc"
good = open(d + "/Zebra/10.png", "rb").read()
os.makedirs(b + "/k1"); open(b + "/k1/ok.png", "wb").write(good)
open(b + "/data.png", "wb").write(good[:60] + bytes([good[60] ^ 0xFF]) + good[61:])
k = len(good) - 13  # the last byte of IDAT's CRC, before the 12 bytes of IEND
open(b + "/crc.png", "wb").write(good[:k] + bytes([good[k] ^ 0xFF]) + good[k + 1:])
open(b + "/cut.png", "wb").write(good[:len(good) - 20])
open(b + "/notpng.png", "wb").write(b"GIF89a" + b"\0" * 40)
# a header that claims 20000 x 20000 pixels: refused before any allocation
open(b + "/huge.png", "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 20000, 20000, 8, 2, 0, 0, 0))
                                  + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))
if have_pil:
    im = Image.new("RGB", (64, 64)); im.putdata([(x * 4, y * 4, 128) for y in range(64) for x in range(64)])
    im.save(b + "/full.jpg", "JPEG", quality=90)
    j = open(b + "/full.jpg", "rb").read()
    open(b + "/cut.jpg", "wb").write(j[:len(j) // 2])
    Image.new("CMYK", (8, 8), (10, 20, 30, 40)).save(b + "/cmyk.jpg", "JPEG")
    k = j.index(b"\xff\xc0")  # baseline SOF: length, precision, height, width
    open(b + "/huge.jpg", "wb").write(j[:k + 5] + struct.pack(">HH", 60000, 60000) + j[k + 9:])
PY
[ -f "$dir/expected.json" ] || { echo "FAIL: could not make the test tree"; exit 1; }
pil=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["pil"])' "$dir/expected.json")
[ "$pil" = True ] || echo "skip: JPEG cases (python3 has no PIL: Debian's python3-pil)"

# read.py SHARD: the shard as JSON {"header": [...], "records": [[label,
# [pixels]], ...]} after checking the layout (§5.6) byte by byte.
cat > "$dir/read.py" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
h = struct.unpack("<16I", data[:64])
assert data[:4] == b"DIMG" and h[1] == 1 and h[2] == 64 and h[9:] == (0,) * 7, h
count, height, width, channels, classes, rec = h[3:9]
img = height * width * channels
assert rec == 4 + (img + 3) // 4 * 4 and len(data) == 64 + count * rec, (h, len(data))
records = []
for i in range(count):
    r = data[64 + i * rec: 64 + (i + 1) * rec]
    label = struct.unpack("<i", r[:4])[0]
    assert 0 <= label < classes and r[4 + img:] == b"\0" * (rec - 4 - img)
    records.append([label, list(r[4:4 + img])])
json.dump({"header": list(h[3:8]), "records": records}, sys.stdout)
PY

# check PREFIX CHANNELS: the shard (and the classes file) hold the expected
# records, pixel for pixel (PNG) or within the tolerance (JPEG).
check() {
  python3 "$dir/read.py" "$1_train.img" > "$dir/got.json" 2> "$dir/err" &&
  python3 - "$dir/got.json" "$dir/expected.json" "$2" "$1_classes.txt" <<'PY' >> "$dir/err" 2>&1
import json, sys
got, want = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
ch = int(sys.argv[3])
assert open(sys.argv[4]).read() == "".join(c + "\n" for c in want["classes"]), "classes file"
assert got["header"] == [len(want["records"]), 4, 4, ch, 3], got["header"]
for i, (g, w) in enumerate(zip(got["records"], want["records"])):
    px = w[1] if ch == 3 else w[2]
    assert g[0] == w[0], "record %d: label %d, expected %d" % (i, g[0], w[0])
    worst = max(abs(a - b) for a, b in zip(g[1], px))
    assert worst <= w[3], "record %d: pixels differ by %d (tolerance %d)\n%s\n%s" % (i, worst, w[3], g[1], px)
PY
}

n=$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["records"]))' "$dir/expected.json")
if "$PREP" --images folder --image-size 4 -o "$dir/o/rgb" "$dir/tree" 2> "$dir/err" &&
   grep -q "^ddpprep: images: $n (train $n, val 0), 4x4x3 (height x width x channels), 3 classes; wrote $dir/o/rgb_train.img, class names in $dir/o/rgb_classes.txt; skipped 4 files that are not .png, .jpg or .jpeg\$" "$dir/err" &&
   check "$dir/o/rgb" 3
then ok "RGB: $n images, labels by sorted class, pixels as the source, 4 files skipped"
else ko "RGB"; fi

if "$PREP" --images folder --image-size 4 --channels 1 -o "$dir/o/gray" "$dir/tree" 2> "$dir/err" &&
   check "$dir/o/gray" 1
then ok "--channels 1: gray by PIL's luma"
else ko "--channels 1"; fi

# The split, and the thread count changes nothing.
if "$PREP" --images folder --image-size 4 --val-frac 0.4 --seed 3 --threads 1 -o "$dir/s1" "$dir/tree" 2> "$dir/err" &&
   "$PREP" --images folder --image-size 4 --val-frac 0.4 --seed 3 --threads 4 -o "$dir/s4" "$dir/tree" 2>> "$dir/err" &&
   cmp -s "$dir/s1_train.img" "$dir/s4_train.img" && cmp -s "$dir/s1_val.img" "$dir/s4_val.img" &&
   python3 "$dir/read.py" "$dir/s1_train.img" > "$dir/t.json" &&
   python3 "$dir/read.py" "$dir/s1_val.img" > "$dir/v.json" &&
   python3 "$dir/read.py" "$dir/o/rgb_train.img" > "$dir/all.json" &&
   python3 - "$dir/t.json" "$dir/v.json" "$dir/all.json" <<'PY' >> "$dir/err" 2>&1
import json, sys
t, v, want = (json.load(open(p))["records"] for p in sys.argv[1:])
ti = vi = 0
for r in want:  # every image is the next of train or of val
    if ti < len(t) and t[ti] == r: ti += 1
    elif vi < len(v) and v[vi] == r: vi += 1
    else: sys.exit("an image is in neither split, in order")
assert ti == len(t) and vi == len(v) and len(t) > 0 and len(v) > 0, (len(t), len(v))
print(len(t), len(v))
PY
then ok "--val-frac 0.4: train + val = every image, in order; same bytes with 1 and 4 threads ($(tail -n 1 "$dir/err"))"
else ko "--val-frac and --threads"; fi

# Bad input: exit status, one line naming the cause, and no bad_* file.
bad() { # description, expected-exit, expected-text, args...
  desc=$1 want=$2 text=$3
  shift 3
  "$PREP" "$@" > "$dir/out" 2>&1 < /dev/null
  rc=$?
  if [ $rc -ne "$want" ] || ! grep -qF -- "$text" "$dir/out" || [ "$(wc -l < "$dir/out")" -ne 1 ] ||
     ls "$dir"/bad_* > /dev/null 2>&1; then
    echo "FAIL: $desc (exit $rc, expected $want and one line '$text')"; sed 's/^/  | /' "$dir/out"
    ls "$dir"/bad_* 2> /dev/null; fail=1
  else
    echo "ok: $desc"
  fi
  rm -f "$dir"/bad_*
}
B="$dir/badsrc" T="$dir/tree"
F="--images folder --image-size 4 -o $dir/bad"
bad "no --image-size" 2 "--images folder needs --image-size N" --images folder -o "$dir/bad" "$T"
bad "two folders" 2 "--images folder needs one input" $F "$T" "$T"
bad "--image-size with idx" 2 "--image-size applies to --images folder only" \
  --images idx --image-size 4 -o "$dir/bad" "$T" "$T"
bad "--threads with cifar10" 2 "--threads applies to --images folder only" \
  --images cifar10 --threads 2 -o "$dir/bad" "$T"
bad "--channels 2" 2 "option --channels: 2 is not 1 (gray) or 3 (RGB)" $F --channels 2 "$T"
bad "--image-size 0" 2 "option --image-size: 0 is out of range" --images folder --image-size 0 -o "$dir/bad" "$T"
bad "a missing folder" 1 "cannot read input folder '$dir/nothing'" $F "$dir/nothing"
bad "a file, not a folder" 1 "input '$T/README' is not a folder" $F "$T/README"
mkdir -p "$dir/c1/only"; cp "$B/k1/ok.png" "$dir/c1/only/"
bad "one class" 1 "input folder '$dir/c1' holds 1 class folder; --images folder needs at least 2" $F "$dir/c1"
mkdir -p "$dir/ce/a" "$dir/ce/b"; cp "$B/k1/ok.png" "$dir/ce/a/"; echo x > "$dir/ce/b/x.txt"
bad "a class without images" 1 "class folder '$dir/ce/b' holds no .png, .jpg or .jpeg file" $F "$dir/ce"
mkdir -p "$dir/cl/a" "$dir/cl/b"; cp "$B/k1/ok.png" "$dir/cl/a/"; cp "$B/k1/ok.png" "$dir/cl/b/"
cp -r "$dir/cl" "$dir/cl0"
ln -s "$dir/gone.png" "$dir/cl/b/link.png"
bad "a dangling link" 1 "cannot read '$dir/cl/b/link.png': No such file or directory" $F "$dir/cl"
mkdir -p "$dir/cn/a" "$dir/cn/b
c"; cp "$B/k1/ok.png" "$dir/cn/a/"; cp "$B/k1/ok.png" "$dir/cn/b
c/"
bad "a class name with a newline" 1 "its name holds a newline" $F "$dir/cn"
# one bad image in class b of a tree whose class a is fine
one_bad() { rm -rf "$dir/cb" && mkdir -p "$dir/cb/a" "$dir/cb/b" && cp "$B/k1/ok.png" "$dir/cb/a/" &&
            cp "$B/k1/ok.png" "$dir/cb/b/0.png" && cp "$B/$1" "$dir/cb/b/$2"; }
one_bad crc.png x.png
bad "a PNG with a bad CRC" 1 "input '$dir/cb/b/x.png': corrupt PNG data at byte" $F "$dir/cb"
grep -q "IDAT: CRC error" "$dir/out" || { echo "FAIL: the message does not say CRC"; sed 's/^/  | /' "$dir/out"; fail=1; }
one_bad data.png x.png
bad "a PNG with corrupt image data" 1 "input '$dir/cb/b/x.png': corrupt PNG data at byte" $F "$dir/cb"
one_bad cut.png x.png
bad "a truncated PNG" 1 "input '$dir/cb/b/x.png': corrupt PNG data at byte" $F "$dir/cb"
one_bad notpng.png x.png
bad "not a PNG" 1 "input '$dir/cb/b/x.png': not a PNG file (no PNG signature at byte 0)" $F "$dir/cb"
one_bad huge.png x.png
bad "a PNG of 20000x20000 pixels" 1 "input '$dir/cb/b/x.png': PNG of 20000x20000 pixels is larger than" $F "$dir/cb"
one_bad notpng.png x.jpg
bad "not a JPEG" 1 "input '$dir/cb/b/x.jpg': not a JPEG file (no SOI marker at byte 0)" $F "$dir/cb"
if [ "$pil" = True ]; then
  one_bad cut.jpg x.jpg
  bad "a truncated JPEG" 1 "input '$dir/cb/b/x.jpg': corrupt JPEG data at byte" $F "$dir/cb"
  one_bad huge.jpg x.jpg
  bad "a JPEG of 60000x60000 pixels" 1 "input '$dir/cb/b/x.jpg': JPEG of 60000x60000 pixels is larger than" $F "$dir/cb"
  one_bad cmyk.jpg x.jpg
  bad "a CMYK JPEG" 1 "input '$dir/cb/b/x.jpg': CMYK JPEG: not supported (convert it to RGB first)" $F "$dir/cb"
  # the first bad file in path order is named, whatever the threads
  one_bad cut.jpg y.jpg && cp "$B/crc.png" "$dir/cb/b/x.png"
  bad "two bad files, 4 threads: the first is named" 1 "input '$dir/cb/b/x.png'" $F --threads 4 "$dir/cb"
fi

# The names file cannot be written (its temporary name is taken by a folder)
# or renamed into place (its name is a folder that is not empty): exit 1,
# one line naming it, and neither shard is left.
mkdir -p "$dir/w/x_classes.txt.tmp"
if ! "$PREP" --images folder --image-size 4 -o "$dir/w/x" "$dir/cl0" > "$dir/err" 2>&1 &&
   grep -q "cannot write '$dir/w/x_classes.txt.tmp'" "$dir/err" && [ "$(wc -l < "$dir/err")" -eq 1 ] &&
   [ "$(ls "$dir/w")" = x_classes.txt.tmp ]
then ok "the names file cannot be written: no shard is left"
else ko "the names file cannot be written"; ls "$dir/w"; fi
rm -rf "$dir/w" && mkdir -p "$dir/w/x_classes.txt/keep"
if ! "$PREP" --images folder --image-size 4 --val-frac 0.5 -o "$dir/w/x" "$dir/cl0" > "$dir/err" 2>&1 &&
   grep -q "cannot rename '$dir/w/x_classes.txt.tmp' to '$dir/w/x_classes.txt'" "$dir/err" &&
   [ "$(wc -l < "$dir/err")" -eq 1 ] && [ "$(ls "$dir/w")" = x_classes.txt ]
then ok "the names file cannot be renamed into place: both shards are removed"
else ko "the names file cannot be renamed into place"; ls "$dir/w"; fi

# A failed run leaves an earlier output under the same prefix as it was.
cp "$dir/o/rgb_train.img" "$dir/before.img"; cp "$dir/o/rgb_classes.txt" "$dir/before.txt"
one_bad crc.png x.png
if ! "$PREP" --images folder --image-size 4 -o "$dir/o/rgb" "$dir/cb" 2> "$dir/err" &&
   cmp -s "$dir/o/rgb_train.img" "$dir/before.img" && cmp -s "$dir/o/rgb_classes.txt" "$dir/before.txt" &&
   ! ls "$dir"/o/*.tmp > /dev/null 2>&1
then ok "a failed run leaves the earlier output untouched"
else ko "a failed run over an earlier output"; fi
exit $fail
