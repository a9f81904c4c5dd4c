# serial.awk SASS: "HGMMA n, serialised m": m counts the HGMMAs that a
# WARPGROUP.DEPBAR follows within 8 instructions and another HGMMA follows
# within 4 more, the mark of wgmmas that ptxas serialised (a wait between
# the k-steps of one group); a group's own wait before the softmax is not one.
/^[ \t]*\/\*[0-9a-f]+\*\// {
  op[n++] = ($0 ~ /HGMMA/) ? "H" : (($0 ~ /WARPGROUP\.DEPBAR/) ? "D" : ".")
}
END {
  h = 0; s = 0
  for (i = 0; i < n; i++) {
    if (op[i] != "H") continue
    h++
    for (j = i + 1; j <= i + 8 && j < n; j++) if (op[j] == "D" || op[j] == "H") break
    if (j > i + 8 || j >= n || op[j] != "D") continue
    for (k = j + 1; k <= j + 4 && k < n; k++) if (op[k] == "H") { s++; break }
  }
  print h, s
}
