#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# Every source file, script and build file carries the project's licence
# line (LICENSE), as libfabric's files carry theirs.
src="${srcdir:-.}"
id='SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only'
missing=$(find "$src/prov" "$src/include" "$src/test" "$src/fabtests-ext" \
	"$src/man" "$src/.ci" "$src/Makefile.am" "$src/configure.ac" \
	"$src/autogen.sh" -type f \
	\( -name '*.[ch]' -o -name '*.sh' -o -name '*.7' -o -name 'Makefile.*' \
	   -o -name 'configure.ac' -o -path '*/scripts/*' -o -path '*/.ci/*' \) \
	! -name 'Makefile.in' 2>/dev/null | while read -r f; do
		grep -q "$id" "$f" || echo "$f"
	done)
if [ -n "$missing" ]; then
	echo "$missing" | sed 's/^/no licence line: /'
	echo "FAIL"
	exit 1
fi
[ -f "$src/LICENSE" ] && [ -f "$src/LICENSES/GPL-2.0" ] ||
	{ echo "FAIL: no LICENSE or LICENSES/GPL-2.0"; exit 1; }
echo "PASS: every file carries '$id'"
