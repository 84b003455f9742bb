# shellcheck shell=sh
# tests/container/debian-mirror.sh: sourced by base-image.sh and
# tests/compat/roots.sh. debian_mirror prints the Debian mirror of this
# machine's apt sources (deb822 or one-line format): every URI that serves
# the bookworm suite itself, first one first. The same mirror serves the
# other releases (bullseye, trixie).
debian_mirror() {
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk '
            /^[ \t]*$/ { if (uri != "" && suite) { print uri; exit }
                         uri = ""; suite = 0; next }
            /^URIs:/ { uri = $2 }
            /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == "bookworm") suite = 1 }
            END { if (uri != "" && suite) print uri }
        ' "$f"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        awk '$1 == "deb" { u = $2; s = $3
                 if ($2 ~ /^\[/) { u = $3; s = $4 }
                 if (s == "bookworm") print u }' "$f"
    done
}
