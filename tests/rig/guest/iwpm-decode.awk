# Decode an `strace -f -tt -xx -s 4096` log of an iwpm daemon into one line per
# port-mapper message, so guest suites can check the daemon's real conversation:
#
#   TIME nl recv src=PORTID CLIENT OP hseq=N hpid=N flags=F ATTR=VAL ...
#        (src=? when the daemon reads without asking for the sender's address)
#   TIME nl send dst=PORTID CLIENT OP hseq=N hpid=N flags=F ATTR=VAL ...
#   TIME nl recv src=PORTID DONE hseq=N err=E        (NLMSG_DONE, the kernel's dump end)
#   TIME nl recv src=PORTID ERROR hseq=N err=E       (NLMSG_ERROR)
#   TIME udp send|recv IP:PORT TYPE vN len=L cp=IP:PORT ap=IP:PORT h=HANDLE [mcp=IP:PORT]
#        echo=VER/PMTIME[/HEX of the 24 unused IPv4 address bytes]
#
# Works with busybox awk (the guest has no python). Accepts -x logs too.
# Usage: awk -f iwpm-decode.awk iwpmd.strace
function hex(s,   i, c, v) { v = 0; s = tolower(s)
  for (i = 1; i <= length(s); i++) { c = index("0123456789abcdef", substr(s, i, 1)); v = v * 16 + c - 1 }
  return v }
# unq(S): strace quoted string body -> byte values in B[1..n]; returns n
function unq(s,   n, c, d) { n = 0
  while (length(s)) {
    c = substr(s, 1, 1)
    if (c == "\\") {
      d = substr(s, 2, 1)
      if (d == "x") { B[++n] = hex(substr(s, 3, 2)); s = substr(s, 5); continue }
      if (d == "n") B[++n] = 10; else if (d == "t") B[++n] = 9; else if (d == "r") B[++n] = 13
      else if (d == "v") B[++n] = 11; else if (d == "f") B[++n] = 12
      else if (d ~ /[0-7]/) { B[++n] = d + 0 } else B[++n] = ORD[d]
      s = substr(s, 3); continue
    }
    B[++n] = ORD[c]; s = substr(s, 2)
  }
  return n }
function txt(s,   n, i, r) { n = unq(s); r = ""; for (i = 1; i <= n; i++) r = r sprintf("%c", B[i]); return r }
function u16(o) { return B[o] + 256 * B[o + 1] }                    # host order (x86)
function u32(o) { return B[o] + 256 * B[o + 1] + 65536 * B[o + 2] + 16777216 * B[o + 3] }
function be16(o) { return 256 * B[o] + B[o + 1] }
function ip4(o) { return B[o] "." B[o + 1] "." B[o + 2] "." B[o + 3] }
function ip6(o,   i, s) { s = ""
  for (i = 0; i < 16; i += 2) s = s (i ? ":" : "") sprintf("%x", 256 * B[o + i] + B[o + i + 1])
  sub(/(^|:)0(:0)+(:|$)/, "::", s); return s }
# sockaddr_storage at byte offset o (1-based)
function ss(o,   fam) { fam = u16(o)
  if (fam == 2) return ip4(o + 4) ":" be16(o + 2)
  if (fam == 10) return "[" ip6(o + 8) "]:" be16(o + 2)
  return "family" fam }
function str(o, len,   i, s) { s = ""
  for (i = 0; i < len && B[o + i] != 0; i++) s = s sprintf("%c", B[o + i]); return s }
BEGIN {
  split("REG_PID ADD_MAPPING QUERY_MAPPING REMOVE_MAPPING REMOTE_INFO HANDLE_ERR MAPINFO MAPINFO_NUM HELLO", OP, " ")
  split("C0 RDMA_CM IWCM RSVD LS NLDEV", CL, " ")
  split("REQUEST ACCEPT ACK REJECT", MT, " ")
  for (i = 32; i < 127; i++) ORD[sprintf("%c", i)] = i
  # attribute names: AN[dir, op, id]; types from the kernel's iwpm policies
  a("recv", 0, "SEQ IF_NAME IBDEV_NAME ULIB_NAME")
  a("recv", 1, "SEQ ADDR FLAGS");  a("recv", 2, "SEQ LOCAL_ADDR REMOTE_ADDR FLAGS")
  a("recv", 3, "SEQ ADDR");        a("recv", 6, "LOCAL_ADDR MAPPED_ADDR FLAGS")
  a("recv", 7, "SEQ SEND_NUM");    a("recv", 8, "ABI_VERSION")
  a("send", 0, "SEQ IBDEV_NAME ULIB_NAME ULIB_VER PID_ERR")
  a("send", 1, "SEQ ADDR MAPPED_LOC_ADDR MAPPING_ERR")
  a("send", 2, "SEQ LOCAL_ADDR REMOTE_ADDR MAPPED_LOC_ADDR MAPPED_REM_ADDR MAPPING_ERR")
  a("send", 4, "SEQ LOCAL_ADDR REMOTE_ADDR MAPPED_LOC_ADDR MAPPED_REM_ADDR MAPPING_ERR")
  a("send", 5, "ERR_SEQ ERR_CODE"); a("send", 6, "ULIB_NAME ULIB_VER")
  a("send", 7, "SEQ SEND_NUM ACK_NUM"); a("send", 8, "ABI_VERSION")
  # a forged request arriving at the daemon looks like the kernel's: same names
  for (k in AN) { split(k, p, SUBSEP); if (p[1] == "recv" && !(("send", p[2], p[3]) in AN)) AN["send", p[2], p[3]] = AN[k] }
}
function a(dir, op, names,   n, i, x) { n = split(names, x, " "); for (i = 1; i <= n; i++) AN[dir, op, i] = x[i] }
# attrs(n, dir, op): decode the attributes in B[1..n]
function attrs(n, dir, op,   o, len, ty, name, out, pl) { out = ""; o = 1
  while (o + 3 <= n) {
    len = u16(o); ty = u16(o + 2) % 16384; if (len < 4) break
    pl = len - 4; name = AN[dir, op, ty]; if (name == "") name = "A" ty
    if (pl >= 128 && name ~ /ADDR/) out = out " " name "=" ss(o + 4)
    else if (name ~ /NAME/) out = out " " name "=" str(o + 4, pl)
    else if (pl == 4) out = out " " name "=" u32(o + 4)
    else if (pl == 2) out = out " " name "=" u16(o + 4)
    else out = out " " name "=len" pl
    o += int((len + 3) / 4) * 4
  }
  return out }
{
  t = ""; for (i = 1; i <= 3 && i <= NF; i++) if ($i ~ /^[0-9]+:[0-9]+:[0-9.]+$/) { t = $i; break }
  if ($0 ~ /= -1 E[A-Z]+/) next
  dir = ($0 ~ /recv(from|msg|mmsg)/) ? "recv" : ($0 ~ /send(to|msg|mmsg)/ ? "send" : "")
  if (dir == "") next
  # a blocking call split by another thread: a send's data is on its first half,
  # a receive's on its "resumed" half
  if (dir == "recv" && $0 ~ /<unfinished/) next
  if (dir == "send" && $0 ~ /resumed>/) next
}
/nlmsg_len=/ {
  peer = "?"; if (match($0, /sa_family=AF_NETLINK, nl_pid=[0-9]+/)) peer = substr($0, RSTART + 29, RLENGTH - 29)
  pw = (dir == "recv") ? "src=" peer : "dst=" peer
  rest = $0
  while (match(rest, /\{nlmsg_len=[0-9]+, nlmsg_type=[^,]+, nlmsg_flags=[^,]+, nlmsg_seq=[0-9]+, nlmsg_pid=[0-9]+\}, /)) {
    hdr = substr(rest, RSTART, RLENGTH); rest = substr(rest, RSTART + RLENGTH)
    match(hdr, /nlmsg_type=[^,]+/); ty = substr(hdr, RSTART + 11, RLENGTH - 11); sub(/ .*/, "", ty)
    match(hdr, /nlmsg_flags=[^,]+/); fl = substr(hdr, RSTART + 12, RLENGTH - 12)
    match(hdr, /nlmsg_seq=[0-9]+/); sq = substr(hdr, RSTART + 10, RLENGTH - 10)
    match(hdr, /nlmsg_pid=[0-9]+/); hp = substr(hdr, RSTART + 10, RLENGTH - 10)
    if (ty == "NLMSG_DONE") { e = rest; sub(/[^-0-9].*/, "", e)
      printf "%s nl %s %s DONE hseq=%s err=%s\n", t, dir, pw, sq, e; nl++; continue }
    if (ty == "NLMSG_ERROR") { e = rest; sub(/^\{error=/, "", e); sub(/[^-0-9A-Z].*/, "", e)
      printf "%s nl %s %s ERROR hseq=%s err=%s\n", t, dir, pw, sq, e; nl++; continue }
    if (ty !~ /^0x/) { printf "%s nl %s %s type=%s hseq=%s\n", t, dir, pw, ty, sq; nl++; continue }
    v = hex(substr(ty, 3)); cl = CL[int(v / 1024) + 1]; op = v % 1024
    ex = ""
    if (match(rest, /^"([^"\\]|\\.)*"/)) { n = unq(substr(rest, 2, RLENGTH - 2)); ex = attrs(n, dir, op) }
    on = OP[op + 1]; if (on == "") on = "OP" op
    printf "%s nl %s %s %s %s hseq=%s hpid=%s flags=%s%s\n", t, dir, pw, cl, on, sq, hp, fl, ex; nl++
  }
  next
}
/sin6?_port=htons\(/ && /"/ {
  match($0, /_port=htons\([0-9]+\)/); port = substr($0, RSTART + 12, RLENGTH - 13)
  addr = "?"
  if (match($0, /inet_addr\("[^"]*"\)/)) addr = txt(substr($0, RSTART + 11, RLENGTH - 13))
  else if (match($0, /inet_pton\(AF_INET6, "[^"]*"/)) addr = "[" txt(substr($0, RSTART + 21, RLENGTH - 22)) "]"
  if (!match($0, /"([^"\\]|\\.)*"/)) next
  n = unq(substr($0, RSTART + 1, RLENGTH - 2))
  len = $NF; if (len !~ /^[0-9]+$/) len = n
  if (len + 0 < n) n = len + 0
  b = B[1]; ty = MT[int(b / 16) % 4 + 1]; ipv = b % 16
  line = sprintf("%s udp %s %s:%s %s v%d len=%d", t, dir, addr, port, ty, ipv, len)
  if (n >= 48) {
    if (ipv == 6) { cp = "[" ip6(17) "]"; ap = "[" ip6(33) "]" } else { cp = ip4(17); ap = ip4(33) }
    h = ""; for (i = 9; i <= 16; i++) h = h sprintf("%02x", B[i])
    line = line sprintf(" cp=%s:%d ap=%s:%d h=%s", cp, be16(7), ap, be16(5), h)
    if (n >= 64) line = line sprintf(" mcp=%s:%d", (ipv == 6) ? "[" ip6(49) "]" : ip4(49), be16(3))
    # what an answer echoes: version bits, pmtime and (IPv4) the 24 unused address bytes
    e = sprintf(" echo=%d/%02x", int(b / 64), B[2])
    if (ipv == 4) { e = e "/"; for (i = 21; i <= 32; i++) e = e sprintf("%02x", B[i])
                    for (i = 37; i <= 48; i++) e = e sprintf("%02x", B[i]) }
    line = line e
  } else line = line " short"
  print line; udp++
}
END { printf "# %d netlink messages, %d UDP messages\n", nl, udp }
