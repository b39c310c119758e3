//! Where accelerate keeps its config, computed exactly as `accelerate.commands.config.config_args` does.

use std::path::PathBuf;

use crate::env_vars::{self, Environment};

/// `os.path.expanduser` (`posixpath.expanduser`): `~` and `~/…` from `home` (`$HOME` if set, even
/// empty), else from the password database, as Python falls back; `~user/…` from the password
/// database; anything else, or a user that does not exist, unchanged.
pub fn expand_user(path: &str, home: Option<&str>) -> PathBuf {
    let Some(rest) = path.strip_prefix('~') else {
        return PathBuf::from(path);
    };
    let (user, tail) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let dir = if user.is_empty() {
        match home {
            Some(h) => Some(h.to_string()),
            None => nix::unistd::User::from_uid(nix::unistd::getuid())
                .ok()
                .flatten()
                .map(|u| u.dir.display().to_string()),
        }
    } else {
        nix::unistd::User::from_name(user)
            .ok()
            .flatten()
            .map(|u| u.dir.display().to_string())
    };
    match dir {
        // Python: `(userhome.rstrip('/') + path[i:]) or '/'`.
        Some(d) => {
            let joined = format!("{}{tail}", d.trim_end_matches('/'));
            PathBuf::from(if joined.is_empty() {
                "/".into()
            } else {
                joined
            })
        }
        None => PathBuf::from(path),
    }
}

/// `config_args.py`'s `hf_cache_home`: `expanduser(os.environ.get("HF_HOME",
/// os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")))`. A variable set to
/// the empty string counts as set, as `os.environ.get` sees it: `HF_HOME=` is the current directory.
pub fn hf_cache_dir(env: &Environment) -> PathBuf {
    let home = env.get(env_vars::HOME);
    match env.get(env_vars::HF_HOME) {
        Some(hf) => expand_user(hf, home),
        None => {
            let cache = env.get(env_vars::XDG_CACHE_HOME).unwrap_or("~/.cache");
            let joined = if cache.is_empty() {
                "huggingface".to_string()
            } else {
                format!("{}/huggingface", cache.trim_end_matches('/'))
            };
            expand_user(&joined, home)
        }
    }
}

/// `<hf cache>/accelerate/default_config.yaml`.
pub fn default_config_path(env: &Environment) -> PathBuf {
    hf_cache_dir(env)
        .join("accelerate")
        .join("default_config.yaml")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_accelerate() {
        let env = Environment::from_pairs([("HOME", "/home/u")]);
        assert_eq!(
            default_config_path(&env),
            PathBuf::from("/home/u/.cache/huggingface/accelerate/default_config.yaml")
        );
        let env = Environment::from_pairs([("HOME", "/home/u"), ("XDG_CACHE_HOME", "/x")]);
        assert_eq!(
            default_config_path(&env),
            PathBuf::from("/x/huggingface/accelerate/default_config.yaml")
        );
        let env = Environment::from_pairs([
            ("HOME", "/home/u"),
            ("XDG_CACHE_HOME", "/x"),
            ("HF_HOME", "~/hf"),
        ]);
        assert_eq!(
            default_config_path(&env),
            PathBuf::from("/home/u/hf/accelerate/default_config.yaml")
        );
    }

    #[test]
    fn unset_and_empty_variables_as_python_reads_them() {
        // HOME unset: the password database, never a literal `~` directory.
        let me = nix::unistd::User::from_uid(nix::unistd::getuid())
            .unwrap()
            .unwrap()
            .dir;
        let env = Environment::from_pairs(Vec::<(String, String)>::new());
        assert_eq!(
            default_config_path(&env),
            me.join(".cache/huggingface/accelerate/default_config.yaml")
        );
        // HF_HOME set empty: `os.path.join("", "accelerate")`, relative to the current directory.
        let env = Environment::from_pairs([("HOME", "/home/u"), ("HF_HOME", "")]);
        assert_eq!(
            default_config_path(&env),
            PathBuf::from("accelerate/default_config.yaml")
        );
        let env = Environment::from_pairs([("HOME", "/home/u"), ("XDG_CACHE_HOME", "")]);
        assert_eq!(
            default_config_path(&env),
            PathBuf::from("huggingface/accelerate/default_config.yaml")
        );
        // HOME set empty: `"" + "/.cache"`.
        let env = Environment::from_pairs([("HOME", "")]);
        assert_eq!(
            default_config_path(&env),
            PathBuf::from("/.cache/huggingface/accelerate/default_config.yaml")
        );
        assert_eq!(expand_user("~", Some("")), PathBuf::from("/"));
        assert_eq!(expand_user("~root/x", None), PathBuf::from("/root/x"));
        assert_eq!(
            expand_user("~no_such_user_here/x", None),
            PathBuf::from("~no_such_user_here/x")
        );
    }
}
