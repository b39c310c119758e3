//! accelerate's `_ask_field` / `_ask_options` with its converters, on top of [`Ask`]: an empty answer
//! takes the default, an answer that does not convert is refused with a message and asked again.
//!
//! Stricter than accelerate where its answer could only be a mistake, always with a message instead of
//! a silent re-ask or a traceback: numbers are range-checked for the key they fill, questions without a
//! default refuse an empty answer (accelerate would store `''`), yes/no also takes `y`/`n`.

use std::io;

use super::prompt::Ask;

pub struct Fields<'a> {
    pub io: &'a mut dyn Ask,
}

fn yes_no_word(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "yes" | "y" => Some(true),
        "no" | "n" => Some(false),
        _ => None,
    }
}

/// An integer as Python's `int()` reads it, plus `1e8`-style answers the prompts themselves suggest.
pub fn parse_int(s: &str) -> Option<i64> {
    let t = s.trim().replace('_', "");
    t.parse::<i64>().ok().or_else(|| {
        t.parse::<f64>()
            .ok()
            .filter(|f| f.is_finite() && f.fract() == 0.0 && f.abs() < 9.0e18)
            .map(|f| f as i64)
    })
}

impl Fields<'_> {
    pub fn say(&mut self, message: &str) {
        self.io.say(message);
    }

    /// A menu of `items`; returns the index.
    pub fn options<S: AsRef<str>>(
        &mut self,
        prompt: &str,
        items: &[S],
        default: usize,
    ) -> io::Result<usize> {
        let items: Vec<String> = items.iter().map(|s| s.as_ref().to_string()).collect();
        self.io.menu(prompt, &items, default)
    }

    /// A menu whose answer is the chosen item itself.
    pub fn choose(
        &mut self,
        prompt: &str,
        items: &[&'static str],
        default: usize,
    ) -> io::Result<&'static str> {
        Ok(items[self.options(prompt, items, default)?])
    }

    pub fn yes_no(&mut self, prompt: &str, default: bool) -> io::Result<bool> {
        loop {
            let answer = self.io.line(prompt)?;
            if answer.trim().is_empty() {
                return Ok(default);
            }
            match yes_no_word(&answer) {
                Some(b) => return Ok(b),
                None => self.io.say("Please enter yes or no."),
            }
        }
    }

    pub fn int(
        &mut self,
        prompt: &str,
        default: Option<i64>,
        min: i64,
        max: i64,
    ) -> io::Result<i64> {
        loop {
            let answer = self.io.line(prompt)?;
            match (answer.trim().is_empty(), default) {
                (true, Some(d)) => return Ok(d),
                (true, None) => self.io.say("Please enter an integer."),
                (false, _) => match parse_int(&answer) {
                    Some(i) if (min..=max).contains(&i) => return Ok(i),
                    Some(_) if max == i64::MAX => self
                        .io
                        .say(&format!("Please enter an integer of at least {min}.")),
                    Some(_) => self
                        .io
                        .say(&format!("Please enter an integer from {min} to {max}.")),
                    None => self.io.say("Please enter an integer."),
                },
            }
        }
    }

    pub fn float(&mut self, prompt: &str, default: f64) -> io::Result<f64> {
        loop {
            let answer = self.io.line(prompt)?;
            if answer.trim().is_empty() {
                return Ok(default);
            }
            match answer.trim().parse::<f64>() {
                Ok(f) if f.is_finite() => return Ok(f),
                _ => self.io.say("Please enter a number."),
            }
        }
    }

    /// Free text; `default` for an empty answer, or `None` when an answer is required.
    pub fn text(&mut self, prompt: &str, default: Option<&str>) -> io::Result<String> {
        self.text_checked(prompt, default, |_| Ok(()))
    }

    /// Free text that must pass `check` (its `Err` is the message shown before asking again).
    pub fn text_checked(
        &mut self,
        prompt: &str,
        default: Option<&str>,
        check: impl Fn(&str) -> Result<(), String>,
    ) -> io::Result<String> {
        loop {
            let answer = self.io.line(prompt)?;
            let value = match (answer.trim().is_empty(), default) {
                (true, Some(d)) => d.to_string(),
                (true, None) => {
                    self.io.say("Please enter a value.");
                    continue;
                }
                (false, _) => answer.trim().to_string(),
            };
            match check(&value) {
                Ok(()) => return Ok(value),
                Err(message) => self.io.say(&message),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ints_like_python_and_the_prompts() {
        assert_eq!(parse_int(" 8 "), Some(8));
        assert_eq!(parse_int("1_000"), Some(1000));
        assert_eq!(parse_int("1e8"), Some(100_000_000));
        assert_eq!(parse_int("-1"), Some(-1));
        assert_eq!(parse_int("1.5"), None);
        assert_eq!(parse_int("eight"), None);
    }

    #[test]
    fn yes_no_words() {
        assert_eq!(yes_no_word("YES"), Some(true));
        assert_eq!(yes_no_word(" n "), Some(false));
        assert_eq!(yes_no_word("true"), None);
    }
}
