//! Which git remotes the operator itself may contact for a tenant (the ls-remote of a tracked
//! branch). The operator runs in the cluster, so a repository URL written in a Stack could
//! otherwise make it reach what only its network position reaches (server-side request
//! forgery): the node's loopback, the cloud metadata service at 169.254.169.254, the Kubernetes
//! API, in-cluster Services. Refused unless the administrator lists them in
//! `GIT_ALLOWED_INTERNAL_HOSTS` ([`AllowList`]):
//!
//! - loopback (127.0.0.0/8, ::1), link-local (169.254.0.0/16, fe80::/10) and unspecified
//!   (0.0.0.0/8, ::) addresses, also in their IPv4-mapped and IPv4-compatible IPv6 forms and in
//!   the decimal, hex and octal IPv4 spellings that git, curl and ssh accept (`2130706433`,
//!   `0x7f.1`, `0177.0.0.1`);
//! - `localhost` (and `*.localhost`), cluster-internal names (`*.svc`, `*.cluster.local`) and
//!   the Kubernetes API service (`kubernetes`, `kubernetes.default*`);
//! - a name any of whose addresses is refused (DNS pointing at 127.0.0.1 or 169.254.169.254).
//!
//! Private ranges (10/8, 172.16/12, 192.168/16, fc00::/7) are not refused: organisations run
//! git servers there. So a short Service name completed by the pod's DNS search path
//! (`git.team`) is not recognised as internal, only its `*.svc` forms are. Pure checks: the
//! lookups are made where the call runs (`source::git`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The operator's setting that lists the internal hosts it may contact.
pub const SETTING: &str = "GIT_ALLOWED_INTERNAL_HOSTS";

const LOOPBACK: &str = "a loopback address";
const LINK_LOCAL: &str = "a link-local address (where cloud metadata services answer)";
const UNSPECIFIED: &str = "an unspecified address (it reaches the local host)";

/// A host as a URL names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    Ip(IpAddr),
    /// Lowercase, without a trailing dot.
    Name(String),
}

impl Host {
    /// `raw` as a URL holds it: brackets, percent-encoding, a trailing dot and any case are
    /// read as resolvers read them, and IPv4 in every spelling `inet_aton` accepts.
    pub fn parse(raw: &str) -> Host {
        let raw = raw.trim();
        // gitoxide keeps git's `[::1]:` (an empty port) as the host.
        let raw = raw
            .strip_suffix(':')
            .filter(|r| r.ends_with(']'))
            .unwrap_or(raw);
        let bare = raw
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(raw);
        // A zone (`fe80::1%25eth0`) does not change which address it is.
        let address = bare.split('%').next().unwrap_or(bare);
        if let Ok(v6) = address.parse::<Ipv6Addr>() {
            return Host::Ip(IpAddr::V6(v6));
        }
        let decoded = percent_decoded(bare).to_ascii_lowercase();
        let name = decoded.trim_end_matches('.');
        match ipv4(name) {
            Some(v4) => Host::Ip(IpAddr::V4(v4)),
            None => Host::Name(name.to_string()),
        }
    }
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Ip(ip) => write!(f, "{ip}"),
            Host::Name(name) => f.write_str(name),
        }
    }
}

fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `s` as an IPv4 address in any spelling `inet_aton` (the resolver of git, curl and ssh) and
/// URL parsers accept: one to four parts, each decimal, octal (`0…`) or hex (`0x…`), the last
/// filling the remaining bytes (`127.1`, `2130706433`, `0x7f.1`, `0177.0.0.1`).
pub fn ipv4(s: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = s.split('.').collect();
    if parts.len() > 4 {
        return None;
    }
    let numbers = parts
        .iter()
        .map(|p| number(p))
        .collect::<Option<Vec<u64>>>()?;
    let (last, leading) = numbers.split_last()?;
    let room = 8 * (4 - leading.len() as u32);
    if leading.iter().any(|n| *n > 255) || *last >= 1u64 << room {
        return None;
    }
    let value = leading
        .iter()
        .enumerate()
        .fold(*last, |v, (i, n)| v | n << (24 - 8 * i as u32));
    u32::try_from(value).ok().map(Ipv4Addr::from)
}

fn number(part: &str) -> Option<u64> {
    let (digits, radix) = match part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
        Some(hex) => (hex, 16),
        None if part.len() > 1 && part.starts_with('0') => (&part[1..], 8),
        None => (part, 10),
    };
    // Longer runs cannot be a byte's worth; a resolver's reading is checked after the lookup.
    if part.is_empty() || digits.len() > 12 || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    // `0x` alone is 0 for inet_aton and URL parsers alike.
    Some(u64::from_str_radix(digits, radix).unwrap_or(0))
}

/// Why the operator does not contact `ip` for a tenant, if it does not.
pub fn refused_ip(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => refused_v4(v4),
        IpAddr::V6(v6) if v6.is_loopback() => Some(LOOPBACK),
        IpAddr::V6(v6) if v6.is_unspecified() => Some(UNSPECIFIED),
        IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80 => Some(LINK_LOCAL),
        // `::ffff:a.b.c.d` (and the deprecated `::a.b.c.d`) reach the IPv4 address.
        IpAddr::V6(v6) => v6.to_ipv4().and_then(refused_v4),
    }
}

fn refused_v4(v4: Ipv4Addr) -> Option<&'static str> {
    if v4.is_loopback() {
        Some(LOOPBACK)
    } else if v4.is_link_local() {
        Some(LINK_LOCAL)
    } else if v4.octets()[0] == 0 {
        Some(UNSPECIFIED)
    } else {
        None
    }
}

/// Why the operator does not contact the host `name` (lowercase, no trailing dot) for a
/// tenant whatever it resolves to, if it does not.
pub fn refused_name(name: &str) -> Option<&'static str> {
    let within = |zone: &str| name == zone || name.ends_with(&format!(".{zone}"));
    if within("localhost") {
        Some("a loopback name")
    } else if ["kubernetes", "kubernetes.default"].contains(&name)
        || name.starts_with("kubernetes.default.")
    {
        Some("the Kubernetes API service")
    } else if within("svc") || within("cluster.local") {
        Some("a cluster-internal Service name")
    } else {
        None
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Entry {
    Name {
        name: String,
        port: Option<u16>,
    },
    Net {
        addr: IpAddr,
        prefix: u8,
        port: Option<u16>,
    },
}

/// The administrator's exceptions (`GIT_ALLOWED_INTERNAL_HOSTS`): hosts (`host`, `host:port`,
/// `[v6]:port`), addresses and ranges (`ADDRESS/BITS`) the operator may contact although they
/// are internal. A name allows that name whatever it resolves to; an address or range allows
/// its addresses, written in a URL or resolved from a name that is not refused by itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowList(Vec<Entry>);

impl AllowList {
    /// The entries, each checked (the flag's values are, at start-up: see [`entry`]); empty
    /// ones are skipped.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<AllowList, String> {
        entries
            .iter()
            .map(|e| e.as_ref().trim())
            .filter(|e| !e.is_empty())
            .map(parse_entry)
            .collect::<Result<Vec<Entry>, String>>()
            .map(AllowList)
    }

    fn allows_name(&self, name: &str, port: u16) -> bool {
        self.0.iter().any(|e| match e {
            Entry::Name { name: n, port: p } => n == name && p.is_none_or(|p| p == port),
            Entry::Net { .. } => false,
        })
    }

    fn allows_ip(&self, ip: IpAddr, port: u16) -> bool {
        let ip = canonical(ip);
        self.0.iter().any(|e| match e {
            Entry::Net {
                addr,
                prefix,
                port: p,
            } => contains(canonical(*addr), *prefix, ip) && p.is_none_or(|p| p == port),
            Entry::Name { .. } => false,
        })
    }
}

/// One value of `GIT_ALLOWED_INTERNAL_HOSTS`, checked (the flag's value parser: a mistyped
/// entry stops the operator at start-up instead of silently allowing nothing).
pub fn entry(text: &str) -> Result<String, String> {
    let text = text.trim();
    if !text.is_empty() {
        parse_entry(text)?;
    }
    Ok(text.to_string())
}

fn parse_entry(text: &str) -> Result<Entry, String> {
    let lower = text.to_ascii_lowercase();
    let bad = |why: &str| format!("{SETTING} entry {text:?} {why}");
    if let Some((addr, bits)) = lower.split_once('/') {
        let bare = addr.trim_start_matches('[').trim_end_matches(']');
        let addr: IpAddr = bare
            .parse()
            .map_err(|_| bad("is not a range: ADDRESS/BITS"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = bits
            .parse::<u8>()
            .ok()
            .filter(|b| *b <= max)
            .ok_or_else(|| bad(&format!("has a prefix length above {max}, or none")))?;
        return Ok(Entry::Net {
            addr,
            prefix,
            port: None,
        });
    }
    let (host, port) = split_port(&lower).ok_or_else(|| bad("has an invalid port"))?;
    match Host::parse(host) {
        Host::Ip(addr) => Ok(Entry::Net {
            addr,
            prefix: if addr.is_ipv4() { 32 } else { 128 },
            port,
        }),
        Host::Name(name)
            if !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')) =>
        {
            Ok(Entry::Name { name, port })
        }
        Host::Name(_) => Err(bad("is not a host, host:port, address or ADDRESS/BITS")),
    }
}

/// `host[:port]`, `[v6][:port]` or a bare IPv6 address; `None` for a port that is not one.
fn split_port(text: &str) -> Option<(&str, Option<u16>)> {
    let port = |p: &str| p.parse::<u16>().ok().filter(|p| *p != 0);
    if text.starts_with('[') {
        let end = text.find(']')?;
        return match &text[end + 1..] {
            "" => Some((&text[..=end], None)),
            rest => Some((&text[..=end], Some(port(rest.strip_prefix(':')?)?))),
        };
    }
    match text.split_once(':') {
        Some((host, p)) if !p.contains(':') => Some((host, Some(port(p)?))),
        _ => Some((text, None)),
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it reaches.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn contains(net: IpAddr, prefix: u8, ip: IpAddr) -> bool {
    let (a, b, width) = match (net, ip) {
        (IpAddr::V4(n), IpAddr::V4(i)) => (u128::from(u32::from(n)), u128::from(u32::from(i)), 32),
        (IpAddr::V6(n), IpAddr::V6(i)) => (u128::from(n), u128::from(i), 128),
        _ => return false,
    };
    let shift = width - u32::from(prefix);
    a.checked_shr(shift).unwrap_or(0) == b.checked_shr(shift).unwrap_or(0)
}

/// A host of a repository URL, and the port it is contacted at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Remote {
    pub host: Host,
    pub port: u16,
}

/// The hosts `url` makes a transport contact: gitoxide's reading (ssh, scp-like `git@host:path`,
/// git://, http(s)) and, for http(s), also the WHATWG reading reqwest connects with. Empty for
/// a local repository or a URL neither reads (the call then fails to parse it).
pub fn remotes_of(url: &str) -> Vec<Remote> {
    use gix::url::Scheme;
    let mut out = Vec::new();
    if let Ok(u) = gix::url::parse(url.trim().as_bytes()) {
        let default = match u.scheme {
            Scheme::Http => Some(80),
            Scheme::Https => Some(443),
            Scheme::Ssh => Some(22),
            Scheme::Git => Some(9418),
            _ => None,
        };
        if let (Some(host), Some(default)) = (u.host(), default) {
            out.push(Remote {
                host: Host::parse(host),
                port: u.port.unwrap_or(default),
            });
        }
    }
    if let Ok(u) = reqwest::Url::parse(url.trim()) {
        // Its host text is already normalised (`0x7f.1` is `127.0.0.1`, IPv6 in brackets).
        if let (Some(host), Some(port), true) = (
            u.host_str(),
            u.port_or_known_default(),
            matches!(u.scheme(), "http" | "https"),
        ) {
            out.push(Remote {
                host: Host::parse(host),
                port,
            });
        }
    }
    out.dedup();
    out
}

/// Why the operator does not contact a repository's host for a tenant: the message a user
/// sees, with the host (never the URL, which may hold credentials), why, and the setting that
/// allows it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

fn refused(host: &Host, why: &str) -> Refused {
    Refused(format!(
        "repository host {host:?} is refused: {why}, internal to the operator's network (the \
         operator does not contact such hosts for a Stack); use a repository at another host, \
         or ask the operator's administrator to add {host:?} to {SETTING}",
        host = host.to_string(),
    ))
}

/// Refuses `url` when it names an internal host the administrator did not allow, before any
/// lookup; else the names (with their ports) whose addresses [`check_addresses`] must check
/// once resolved.
pub fn check_url(url: &str, allowed: &AllowList) -> Result<Vec<(String, u16)>, Refused> {
    let mut names = Vec::new();
    for Remote { host, port } in remotes_of(url) {
        match &host {
            Host::Name(name) if allowed.allows_name(name, port) => {}
            Host::Name(name) => match refused_name(name) {
                Some(why) => return Err(refused(&host, &format!("it is {why}"))),
                None => names.push((name.clone(), port)),
            },
            Host::Ip(ip) => {
                if let Some(why) = refused_ip(*ip).filter(|_| !allowed.allows_ip(*ip, port)) {
                    return Err(refused(&host, &format!("it is {why}")));
                }
            }
        }
    }
    names.dedup();
    Ok(names)
}

/// Refuses the host `name` when it or any address it resolved to is internal and not allowed.
pub fn check_addresses(
    name: &str,
    port: u16,
    addrs: &[IpAddr],
    allowed: &AllowList,
) -> Result<(), Refused> {
    let host = Host::parse(name);
    let name = host.to_string();
    if allowed.allows_name(&name, port) {
        return Ok(());
    }
    if let Some(why) = refused_name(&name) {
        return Err(refused(&host, &format!("it is {why}")));
    }
    for ip in addrs {
        if let Some(why) = refused_ip(*ip).filter(|_| !allowed.allows_ip(*ip, port)) {
            return Err(refused(&host, &format!("it resolves to {ip}, {why}")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allow(entries: &[&str]) -> AllowList {
        AllowList::parse(entries).unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv4_spellings_are_the_addresses_they_are() {
        for (spelling, address) in [
            ("127.0.0.1", "127.0.0.1"),
            ("2130706433", "127.0.0.1"),
            ("0x7f000001", "127.0.0.1"),
            ("0x7f.1", "127.0.0.1"),
            ("0X7F.0.0.1", "127.0.0.1"),
            ("0177.0.0.1", "127.0.0.1"),
            ("0177.1", "127.0.0.1"),
            ("127.1", "127.0.0.1"),
            ("127.0.1", "127.0.0.1"),
            ("0x7f.0x0.0x0.0x1", "127.0.0.1"),
            ("017700000001", "127.0.0.1"),
            ("0xa9fea9fe", "169.254.169.254"),
            ("2852039166", "169.254.169.254"),
            ("0251.0376.0251.0376", "169.254.169.254"),
            ("169.254.43518", "169.254.169.254"),
            ("0", "0.0.0.0"),
            ("0x", "0.0.0.0"),
            ("8.8.8.8", "8.8.8.8"),
        ] {
            assert_eq!(ipv4(spelling), Some(address.parse().unwrap()), "{spelling}");
        }
        for name in [
            "",
            "github.com",
            "1.2.3.4.5",
            "256.0.0.1",
            "1.2.3.256",
            "4294967296",
            "08.0.0.1",
            "0x1g.0.0.1",
            "127..1",
            "+1.2.3.4",
            "1e100.net",
            "127.0.0.1x",
        ] {
            assert_eq!(ipv4(name), None, "{name}");
        }
    }

    #[test]
    fn hosts_as_urls_write_them() {
        for (raw, host) in [
            ("[::1]", Host::Ip(ip("::1"))),
            ("[::1]:", Host::Ip(ip("::1"))),
            ("::1", Host::Ip(ip("::1"))),
            ("[fe80::1%25eth0]", Host::Ip(ip("fe80::1"))),
            ("LOCALHOST.", Host::Name("localhost".into())),
            ("%6c%6fcalhost", Host::Name("localhost".into())),
            ("%31%32%37.0.0.1", Host::Ip(ip("127.0.0.1"))),
            ("0x7f.1", Host::Ip(ip("127.0.0.1"))),
            ("Example.COM", Host::Name("example.com".into())),
        ] {
            assert_eq!(Host::parse(raw), host, "{raw}");
        }
    }

    #[test]
    fn internal_addresses_are_refused() {
        for (address, why) in [
            ("127.0.0.1", LOOPBACK),
            ("127.255.255.254", LOOPBACK),
            ("::1", LOOPBACK),
            ("169.254.169.254", LINK_LOCAL),
            ("169.254.0.1", LINK_LOCAL),
            ("fe80::1", LINK_LOCAL),
            ("febf::1", LINK_LOCAL),
            ("0.0.0.0", UNSPECIFIED),
            ("0.1.2.3", UNSPECIFIED),
            ("::", UNSPECIFIED),
            ("::ffff:127.0.0.1", LOOPBACK),
            ("::ffff:7f00:1", LOOPBACK),
            ("::ffff:169.254.169.254", LINK_LOCAL),
            ("::ffff:0.0.0.0", UNSPECIFIED),
            ("::127.0.0.1", LOOPBACK),
        ] {
            assert_eq!(refused_ip(ip(address)), Some(why), "{address}");
        }
        for address in [
            "8.8.8.8",
            "10.0.0.1",
            "192.168.1.1",
            "172.16.0.1",
            "2001:db8::1",
            "fec0::1",
            "::ffff:8.8.8.8",
            "128.0.0.1",
            "169.255.0.1",
        ] {
            assert_eq!(refused_ip(ip(address)), None, "{address}");
        }
    }

    #[test]
    fn internal_names_are_refused() {
        for name in [
            "localhost",
            "git.localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
            "gitea.gitea.svc",
            "gitea.gitea.svc.cluster.local",
            "anything.cluster.local",
            "cluster.local",
        ] {
            assert!(refused_name(name).is_some(), "{name}");
        }
        for name in [
            "github.com",
            "localhost.example.com",
            "svc.example.com",
            "kubernetes.io",
            "mylocalhost",
            "cluster.local.example.com",
        ] {
            assert_eq!(refused_name(name), None, "{name}");
        }
    }

    #[test]
    fn every_scheme_and_spelling_of_an_internal_url_is_refused() {
        let none = AllowList::default();
        for url in [
            "http://169.254.169.254/x.git",
            "https://169.254.169.254/latest/meta-data",
            "http://2130706433/x.git",
            "http://0x7f.1/x.git",
            "http://0177.0.0.1/x.git",
            "http://127.1:8080/x.git",
            "http://[::1]/x.git",
            "http://[::ffff:127.0.0.1]/x.git",
            "http://[::ffff:a9fe:a9fe]/x.git",
            "http://[fe80::1%25eth0]/x.git",
            "http://0.0.0.0/x.git",
            "http://[::]/x.git",
            "http://localhost/x.git",
            "http://LocalHost./x.git",
            "http://%6c%6fcalhost/x.git",
            "https://user:s3cret@localhost/x.git",
            "ssh://git@127.0.0.1/x.git",
            "ssh://git@[::1]:2222/x.git",
            "git+ssh://git@0x7f.1/x.git",
            "git@127.0.0.1:org/x.git",
            "git@0177.0.0.1:org/x.git",
            "git@localhost:org/x.git",
            "git://127.0.0.1/x.git",
            "git://169.254.169.254:9418/x.git",
            "https://kubernetes.default.svc/api",
            "https://kubernetes/x.git",
            "http://gitea.gitea.svc.cluster.local:3000/x.git",
            "http://gitea.gitea.svc:3000/x.git",
        ] {
            let e = check_url(url, &none).expect_err(url).to_string();
            assert!(e.contains("is refused"), "{url}: {e}");
            assert!(e.contains(SETTING), "{url}: {e}");
            assert!(!e.contains("s3cret") && !e.contains("user"), "{url}: {e}");
        }
        let e = check_url("http://0x7f.1/x.git", &none)
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"127.0.0.1\"") && e.contains(LOOPBACK), "{e}");
        let e = check_url("http://169.254.169.254/x.git", &none).unwrap_err();
        assert!(e.0.contains("link-local"), "{e}");
        // Public hosts are left to the lookup; local repositories have no host.
        assert_eq!(
            check_url("https://github.com/org/x.git", &none),
            Ok(vec![("github.com".to_string(), 443)])
        );
        assert_eq!(
            check_url("git@github.com:org/x.git", &none),
            Ok(vec![("github.com".to_string(), 22)])
        );
        assert_eq!(check_url("https://10.0.0.5/x.git", &none), Ok(vec![]));
        assert_eq!(check_url("file:///tmp/x.git", &none), Ok(vec![]));
    }

    #[test]
    fn the_allow_list_lets_named_hosts_addresses_and_ranges_through() {
        let list = allow(&[
            "127.0.0.1",
            "git.internal:8443",
            "[::1]:2222",
            "10.0.0.0/8",
            "169.254.0.0/16",
            "Gitea.Gitea.svc.cluster.local",
            "fe80::/10",
        ]);
        for url in [
            "http://127.0.0.1:34567/x.git",
            "http://2130706433/x.git",
            "http://[::ffff:127.0.0.1]/x.git",
            "git@127.0.0.1:x.git",
            "ssh://git@[::1]:2222/x.git",
            "http://169.254.169.254/x.git",
            "http://[fe80::1]/x.git",
            "http://gitea.gitea.svc.cluster.local:3000/x.git",
        ] {
            assert!(check_url(url, &list).is_ok(), "{url}");
        }
        for url in [
            "http://127.0.0.2/x.git",
            "http://[::1]/x.git",
            "http://localhost/x.git",
            "http://kubernetes.default.svc/x",
        ] {
            assert!(check_url(url, &list).is_err(), "{url}");
        }
        // A name allowed by name is not resolved (whatever it resolves to is meant).
        assert_eq!(
            check_url("https://git.internal:8443/x.git", &list),
            Ok(vec![])
        );
        assert!(check_addresses("git.internal", 8443, &[ip("127.0.0.9")], &list).is_ok());
        // Only at its port.
        assert_eq!(
            check_url("https://git.internal/x.git", &list),
            Ok(vec![("git.internal".to_string(), 443)])
        );
        assert!(check_addresses("git.internal", 443, &[ip("127.0.0.9")], &list).is_err());
        // An allowed address does not allow a refused name that resolves to it.
        assert!(check_addresses("localhost", 80, &[ip("127.0.0.1")], &list).is_err());
        // A range with a zero prefix holds every address of its family.
        let all = allow(&["0.0.0.0/0"]);
        assert!(check_url("http://127.0.0.1/x.git", &all).is_ok());
        assert!(check_url("http://[::1]/x.git", &all).is_err());
    }

    #[test]
    fn resolved_addresses_are_checked() {
        let none = AllowList::default();
        let e = check_addresses(
            "git.example.com",
            443,
            &[ip("8.8.8.8"), ip("127.0.0.1")],
            &none,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("\"git.example.com\""), "{e}");
        assert!(
            e.contains("resolves to 127.0.0.1, a loopback address"),
            "{e}"
        );
        assert!(e.contains(SETTING), "{e}");
        let e = check_addresses("meta.example.com", 80, &[ip("169.254.169.254")], &none)
            .unwrap_err()
            .to_string();
        assert!(e.contains("link-local"), "{e}");
        assert!(check_addresses("git.example.com", 443, &[ip("::ffff:7f00:1")], &none).is_err());
        assert!(check_addresses("git.example.com", 443, &[ip("140.82.112.3")], &none).is_ok());
        let list = allow(&["127.0.0.0/8"]);
        assert!(check_addresses("git.example.com", 443, &[ip("127.0.0.1")], &list).is_ok());
        assert!(check_addresses("git.example.com", 443, &[ip("::1")], &list).is_err());
    }

    #[test]
    fn allow_list_entries_are_checked() {
        for good in [
            "127.0.0.1",
            "127.0.0.1:8080",
            "::1",
            "[::1]",
            "[::1]:22",
            "10.0.0.0/8",
            "fd00::/8",
            "git.example.com",
            "git.example.com:8443",
            "gitea.gitea.svc.cluster.local",
            "",
            "  ",
        ] {
            assert!(entry(good).is_ok(), "{good}");
        }
        for bad in [
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/",
            "example.com/8",
            "host:0",
            "host:99999",
            "host:",
            "[::1]:x",
            "http://host",
            "a b",
        ] {
            let e = entry(bad).unwrap_err();
            assert!(e.contains(SETTING), "{bad}: {e}");
        }
        assert_eq!(entry(" git.example.com "), Ok("git.example.com".into()));
        assert_eq!(AllowList::parse(&["", " "]), Ok(AllowList::default()));
    }
}
