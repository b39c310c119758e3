//! MUNGE, the authentication service every SLURM cluster runs on every node (SLURM signs its own
//! RPCs with it): a credential encoded by `munged` carries the encoding process's uid and gid and a
//! payload, encrypted and MAC'd under the cluster's key, and decodes on any node of the cluster —
//! once (munged keeps a replay cache), within its time-to-live (300 s by default), and here only by
//! a process of our own uid (the credentials are restricted to it).
//!
//! libmunge (`libmunge.so.2`) is loaded when a multi-node run under SLURM first needs it, not linked:
//! no tool needs it installed, and a cluster without MUNGE (SLURM's `auth/slurm`) is told why MUNGE
//! is not in force. Its socket is the one SLURM itself is configured with (`AuthInfo=socket=PATH` in
//! slurm.conf, as the local cluster of `scripts/cluster` sets it), else libmunge's default.
//! Each call opens its own context, so that calls on different threads share nothing.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `MUNGE_OPT_SOCKET` and `MUNGE_OPT_UID_RESTRICTION` (munge.h).
const OPT_SOCKET: c_int = 8;
const OPT_UID_RESTRICTION: c_int = 9;

type CtxCreate = unsafe extern "C" fn() -> *mut c_void;
type CtxDestroy = unsafe extern "C" fn(*mut c_void);
type CtxSet = unsafe extern "C" fn(*mut c_void, c_int, ...) -> c_int;
type Encode = unsafe extern "C" fn(*mut *mut c_char, *mut c_void, *const c_void, c_int) -> c_int;
type Decode = unsafe extern "C" fn(
    *const c_char,
    *mut c_void,
    *mut *mut c_void,
    *mut c_int,
    *mut libc::uid_t,
    *mut libc::gid_t,
) -> c_int;
type StrError = unsafe extern "C" fn(c_int) -> *const c_char;

struct Lib {
    // Kept loaded for the functions below.
    _lib: libloading::Library,
    ctx_create: CtxCreate,
    ctx_destroy: CtxDestroy,
    ctx_set: CtxSet,
    encode: Encode,
    decode: Decode,
    strerror: StrError,
}

/// A handle on this node's munged.
#[derive(Clone)]
pub struct Munge {
    lib: Arc<Lib>,
    socket: Option<CString>,
    /// Where the socket was found, for messages.
    socket_shown: String,
    uid: u32,
}

impl std::fmt::Debug for Munge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Munge({})", self.socket_shown)
    }
}

/// A decoded credential.
#[derive(Debug)]
pub struct Decoded {
    pub uid: u32,
    pub payload: Vec<u8>,
}

/// One context, destroyed when dropped.
struct Ctx<'a>(&'a Lib, *mut c_void);

impl Drop for Ctx<'_> {
    fn drop(&mut self) {
        // SAFETY: the context came from munge_ctx_create and is destroyed once.
        unsafe { (self.0.ctx_destroy)(self.1) }
    }
}

impl Munge {
    /// libmunge talking to the munged of `socket` (`None`: libmunge's default), checked by encoding
    /// one credential; `Err` says why MUNGE cannot be used here.
    pub fn open(socket: Option<&Path>) -> Result<Munge, String> {
        // SAFETY: loading libmunge runs no initialiser with preconditions; each symbol is given the
        // C prototype munge.h declares for it.
        let lib = unsafe {
            let l = libloading::Library::new("libmunge.so.2")
                .map_err(|e| format!("libmunge is not installed ({e})"))?;
            macro_rules! sym {
                ($name:literal) => {
                    *l.get($name).map_err(|e| {
                        format!("libmunge lacks {}: {e}", String::from_utf8_lossy($name))
                    })?
                };
            }
            let ctx_create: CtxCreate = sym!(b"munge_ctx_create\0");
            let ctx_destroy: CtxDestroy = sym!(b"munge_ctx_destroy\0");
            let ctx_set: CtxSet = sym!(b"munge_ctx_set\0");
            let encode: Encode = sym!(b"munge_encode\0");
            let decode: Decode = sym!(b"munge_decode\0");
            let strerror: StrError = sym!(b"munge_strerror\0");
            Lib {
                _lib: l,
                ctx_create,
                ctx_destroy,
                ctx_set,
                encode,
                decode,
                strerror,
            }
        };
        let socket_shown = socket.map_or_else(
            || "libmunge's default socket".to_string(),
            |p| p.display().to_string(),
        );
        let socket = match socket {
            Some(p) => Some(
                CString::new(p.as_os_str().as_encoded_bytes())
                    .map_err(|_| format!("{}: a NUL byte in the socket path", p.display()))?,
            ),
            None => None,
        };
        let m = Munge {
            lib: Arc::new(lib),
            socket,
            socket_shown,
            // SAFETY: getuid cannot fail.
            uid: unsafe { libc::getuid() },
        };
        m.encode(b"accel-launch: is munged there?")
            .map_err(|e| format!("munged at {} does not answer: {e}", m.socket_shown))?;
        Ok(m)
    }

    /// Under SLURM: the munged SLURM is configured with (`AuthInfo=socket=…` in `slurm_conf`, the
    /// file `SLURM_CONF` names or /etc/slurm/slurm.conf), else libmunge's default socket.
    pub fn for_slurm(slurm_conf: Option<&str>) -> Result<Munge, String> {
        let conf = slurm_conf.unwrap_or("/etc/slurm/slurm.conf");
        let text = std::fs::read_to_string(conf).unwrap_or_default();
        let socket = auth_socket(&text);
        Munge::open(socket.as_deref())
    }

    /// This process's uid: the one every credential of the run must carry.
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// Where munged is reached.
    pub fn socket(&self) -> &str {
        &self.socket_shown
    }

    fn ctx(&self) -> Result<Ctx<'_>, String> {
        // SAFETY: munge_ctx_create has no preconditions; NULL is checked.
        let c = unsafe { (self.lib.ctx_create)() };
        if c.is_null() {
            return Err("libmunge could not create a context".into());
        }
        let ctx = Ctx(&self.lib, c);
        if let Some(s) = &self.socket {
            // SAFETY: MUNGE_OPT_SOCKET takes a NUL-terminated string, which libmunge copies.
            let e = unsafe { (self.lib.ctx_set)(c, OPT_SOCKET, s.as_ptr()) };
            if e != 0 {
                return Err(self.error(e));
            }
        }
        Ok(ctx)
    }

    fn error(&self, e: c_int) -> String {
        // SAFETY: munge_strerror returns a static NUL-terminated string for any code.
        let s = unsafe { (self.lib.strerror)(e) };
        if s.is_null() {
            return format!("MUNGE error {e}");
        }
        // SAFETY: non-NULL, NUL-terminated, static.
        unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
    }

    /// A credential carrying `payload`, which only a process of our own uid can decode.
    pub fn encode(&self, payload: &[u8]) -> Result<String, String> {
        let ctx = self.ctx()?;
        let len = c_int::try_from(payload.len()).map_err(|_| "payload too long".to_string())?;
        // SAFETY: MUNGE_OPT_UID_RESTRICTION takes a uid_t (promoted as an unsigned int).
        let e = unsafe { (self.lib.ctx_set)(ctx.1, OPT_UID_RESTRICTION, self.uid as libc::c_uint) };
        if e != 0 {
            return Err(self.error(e));
        }
        let mut cred: *mut c_char = std::ptr::null_mut();
        // SAFETY: `payload` is valid for `len` bytes; on success `cred` is a malloc'd
        // NUL-terminated string that we free.
        let e = unsafe { (self.lib.encode)(&mut cred, ctx.1, payload.as_ptr().cast(), len) };
        if e != 0 || cred.is_null() {
            return Err(self.error(e));
        }
        // SAFETY: as above.
        let out = unsafe { CStr::from_ptr(cred) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: allocated by libmunge with malloc.
        unsafe { libc::free(cred.cast()) };
        Ok(out)
    }

    /// Checks a credential with munged: its uid and payload, or why it is refused (forged, expired,
    /// replayed, encoded under another key, restricted to another uid).
    pub fn decode(&self, cred: &str) -> Result<Decoded, String> {
        if cred.len() > 64 * 1024 {
            return Err("a credential longer than 64 KiB".into());
        }
        let c = CString::new(cred).map_err(|_| "a NUL byte in the credential".to_string())?;
        let ctx = self.ctx()?;
        let mut buf: *mut c_void = std::ptr::null_mut();
        let mut len: c_int = 0;
        let mut uid: libc::uid_t = u32::MAX;
        let mut gid: libc::gid_t = u32::MAX;
        // SAFETY: a NUL-terminated credential; out-pointers to locals; `buf`, when set, is a
        // malloc'd buffer of `len` bytes (+ NUL) that we free whatever the result.
        let e =
            unsafe { (self.lib.decode)(c.as_ptr(), ctx.1, &mut buf, &mut len, &mut uid, &mut gid) };
        let payload = if buf.is_null() || len <= 0 {
            Vec::new()
        } else {
            // SAFETY: as above.
            unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len as usize) }.to_vec()
        };
        if !buf.is_null() {
            // SAFETY: allocated by libmunge with malloc.
            unsafe { libc::free(buf) };
        }
        if e != 0 {
            return Err(self.error(e));
        }
        Ok(Decoded { uid, payload })
    }
}

/// The munged socket in slurm.conf's `AuthInfo` (`socket=PATH`, among comma-separated options).
fn auth_socket(conf: &str) -> Option<PathBuf> {
    conf.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter_map(|l| {
            let (k, v) = l.split_once('=')?;
            k.trim()
                .eq_ignore_ascii_case("AuthInfo")
                .then_some(v.trim())
        })
        .flat_map(|v| v.split(','))
        .find_map(|opt| {
            let (k, v) = opt.split_once('=')?;
            (k.trim() == "socket").then(|| PathBuf::from(v.trim().trim_matches('"')))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_comes_from_slurms_auth_info() {
        let conf =
            "# x\nAuthType=auth/munge\nAuthInfo=cred_expire=30,socket=/tmp/c/munge.socket # ours\n";
        assert_eq!(
            auth_socket(conf),
            Some(PathBuf::from("/tmp/c/munge.socket"))
        );
        assert_eq!(auth_socket("AuthType=auth/munge\n"), None);
        assert_eq!(
            auth_socket("authinfo = socket=/run/m.sock\n"),
            Some(PathBuf::from("/run/m.sock"))
        );
    }
}
