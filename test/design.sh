#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# docs/design.md's table of files says, for each source file, the other
# files it calls.  This computes that from the provider's objects' symbol
# tables (nm): the files whose global symbols (mrl_* functions, ops tables,
# knobs) an object uses; the logging handle (mrl_prov, which every file's
# warnings name) aside.  Any row that differs fails, with what nm says.
set -e
objs=$(ls prov/multirail/.libs/libmultirail_fi_la-mrl_*.o 2>/dev/null || true)
if [ -z "$objs" ]; then
	echo "SKIP: no objects in prov/multirail/.libs (build first)"
	exit 77
fi
doc="${srcdir:-.}/docs/design.md"
short() {	# prov/multirail/.libs/libmultirail_fi_la-mrl_rma.o -> rma
	basename "$1" .o | sed 's/^libmultirail_fi_la-mrl_//'
}
defs=$(mktemp)
trap 'rm -f "$defs"' EXIT
for o in $objs; do
	nm --defined-only -g "$o" | awk -v f="$(short "$o")" '{ print $3, f }'
done | sort >"$defs"
bad=0
for o in $objs; do
	f=$(short "$o")
	got=$(nm -u "$o" | awk '$2 != "mrl_prov" { print $2 }' | sort -u |
	      join - "$defs" | awk -v f="$f" '$2 != f { print $2 }' |
	      sort -u | paste -sd, - | sed 's/,/, /g')
	[ -n "$got" ] || got=-
	row=$(grep "^| \`mrl_$f.c\` |" "$doc" || true)
	if [ -z "$row" ]; then
		echo "FAIL: mrl_$f.c has no row in docs/design.md (calls: $got)"
		bad=1
		continue
	fi
	want=$(echo "$row" | awk -F'|' '{ print $(NF-1) }' |
	       sed 's/([^)]*)//g; s/^ *//; s/ *$//' | tr ',' '\n' |
	       sed 's/^ *//; s/ *$//' | sort -u | paste -sd, - |
	       sed 's/,/, /g')
	if [ "$got" != "$want" ]; then
		echo "FAIL: mrl_$f.c: design.md says it calls \"$want\"; nm says \"$got\""
		bad=1
	fi
done
[ "$bad" = 0 ] && echo "PASS: every file's calls as design.md says"
exit $bad
