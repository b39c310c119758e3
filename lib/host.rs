//! This host's names: its host name (failure reports, the join, `--report_json`) and its fully
//! qualified name as Python's `socket.getfqdn()` finds it (torchrun's local rendezvous gives it to
//! the workers as MASTER_ADDR).

/// The kernel's host name (`gethostname`), `localhost` if it cannot be read.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "localhost".into())
}

extern "C" {
    // glibc's; the libc crate does not declare it.
    fn gethostbyaddr(
        addr: *const libc::c_void,
        len: libc::socklen_t,
        family: libc::c_int,
    ) -> *mut libc::hostent;
}

/// This host's fully qualified name as Python's `socket.getfqdn()` finds it, which torchrun's c10d
/// rendezvous gives its workers as MASTER_ADDR: the host name resolved to its first address, that
/// address looked up back, and the first of the names found (official name, then aliases) that holds
/// a dot, else the official name; the plain host name when a lookup fails.
pub fn fqdn() -> String {
    let name = hostname();
    lookup_fqdn(&name).unwrap_or(name)
}

fn lookup_fqdn(name: &str) -> Option<String> {
    use std::ffi::{CStr, CString};
    let c_name = CString::new(name).ok()?;
    let mut res: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: hints zeroed as getaddrinfo expects; `res` freed below.
    let hints: libc::addrinfo = unsafe { std::mem::zeroed() };
    if unsafe { libc::getaddrinfo(c_name.as_ptr(), std::ptr::null(), &hints, &mut res) } != 0
        || res.is_null()
    {
        return None;
    }
    // SAFETY: `res` is a valid list from getaddrinfo; its first entry's address is read by
    // gethostbyaddr before freeaddrinfo.
    let found = unsafe {
        let ai = &*res;
        let (ptr, len): (*const libc::c_void, libc::socklen_t) = match ai.ai_family {
            libc::AF_INET => {
                let sin = &*(ai.ai_addr as *const libc::sockaddr_in);
                (
                    &sin.sin_addr as *const _ as *const libc::c_void,
                    std::mem::size_of::<libc::in_addr>() as libc::socklen_t,
                )
            }
            libc::AF_INET6 => {
                let sin6 = &*(ai.ai_addr as *const libc::sockaddr_in6);
                (
                    &sin6.sin6_addr as *const _ as *const libc::c_void,
                    std::mem::size_of::<libc::in6_addr>() as libc::socklen_t,
                )
            }
            _ => (std::ptr::null(), 0),
        };
        let he = if ptr.is_null() {
            std::ptr::null_mut()
        } else {
            gethostbyaddr(ptr, len, ai.ai_family)
        };
        let mut names = Vec::new();
        if !he.is_null() {
            let he = &*he;
            if !he.h_name.is_null() {
                names.push(CStr::from_ptr(he.h_name).to_string_lossy().into_owned());
            }
            let mut a = he.h_aliases;
            while !a.is_null() && !(*a).is_null() {
                names.push(CStr::from_ptr(*a).to_string_lossy().into_owned());
                a = a.add(1);
            }
        }
        libc::freeaddrinfo(res);
        names
    };
    let official = found.first()?.clone();
    Some(
        found
            .into_iter()
            .find(|n| n.contains('.'))
            .unwrap_or(official),
    )
}
