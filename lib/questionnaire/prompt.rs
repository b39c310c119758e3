//! The two widgets the questionnaire needs, behind a small trait so the question flow can be driven by
//! a script in unit tests and by the terminal for users.
//!
//! Menus are drawn here on `console` rather than with `dialoguer::Select`: accelerate's `BulletMenu`
//! moves to a row when its number key is pressed, and people who type `4⏎` for multi-GPU out of habit
//! must not silently get the default instead. Free-text answers go through `dialoguer::Input`, which
//! gives line editing; the theme prints accelerate's prompts verbatim (they carry their own `[default]`).

use std::fmt;
use std::io;

use dialoguer::console::{self, style, Key, Term};
use dialoguer::theme::Theme;
use dialoguer::Input;

/// Where answers come from.
pub trait Ask {
    /// The index of the chosen item; `default` is where the cursor starts.
    fn menu(&mut self, prompt: &str, items: &[String], default: usize) -> io::Result<usize>;
    /// One line of text, as typed (an empty line is an empty string).
    fn line(&mut self, prompt: &str) -> io::Result<String>;
    /// A message between questions (why an answer was refused, a note).
    fn say(&mut self, message: &str);
}

/// The user at a terminal (stdin for keys, stderr for drawing: stdout stays free for data).
pub struct Terminal {
    term: Term,
}

impl Terminal {
    pub fn new(color: bool) -> Terminal {
        console::set_colors_enabled_stderr(color);
        Terminal {
            term: Term::stderr(),
        }
    }

    fn draw_rows(&self, items: &[String], pos: usize, rows: usize) -> io::Result<usize> {
        // A window around the cursor when the list is taller than the terminal (the rank menu of a large job).
        let start = pos
            .saturating_sub(rows.saturating_sub(1))
            .min(items.len().saturating_sub(rows));
        let end = (start + rows).min(items.len());
        for (i, item) in items.iter().enumerate().take(end).skip(start) {
            if i == pos {
                self.term
                    .write_line(&format!(" ➔  {}", style(item).green().for_stderr()))?;
            } else {
                self.term.write_line(&format!("    {item}"))?;
            }
        }
        Ok(end - start)
    }
}

impl Ask for Terminal {
    fn menu(&mut self, prompt: &str, items: &[String], default: usize) -> io::Result<usize> {
        let t = &self.term;
        t.write_line("")?;
        t.write_line(&style(prompt).bold().for_stderr().to_string())?;
        t.write_line(
            &style(
                "Please select a choice using the arrow or number keys, and selecting with enter",
            )
            .dim()
            .for_stderr()
            .to_string(),
        )?;
        let rows = (t.size().0 as usize).saturating_sub(4).max(3);
        let mut pos = default.min(items.len().saturating_sub(1));
        loop {
            let drawn = self.draw_rows(items, pos, rows)?;
            t.flush()?;
            let key = t.read_key()?;
            match key {
                Key::ArrowUp | Key::Char('k') | Key::BackTab => pos = pos.saturating_sub(1),
                Key::ArrowDown | Key::Char('j') | Key::Tab if pos + 1 < items.len() => pos += 1,
                // As in BulletMenu: a digit moves the cursor to that row; Enter confirms.
                Key::Char(c) if c.is_ascii_digit() => {
                    let row = c as usize - '0' as usize;
                    if row < items.len() {
                        pos = row;
                    }
                }
                _ => {}
            }
            t.clear_last_lines(drawn)?;
            if key == Key::Enter {
                break;
            }
        }
        t.clear_last_lines(1)?;
        t.write_line(&style(&items[pos]).green().for_stderr().to_string())?;
        Ok(pos)
    }

    fn line(&mut self, prompt: &str) -> io::Result<String> {
        // dialoguer redraws the prompt line after Enter counting newlines, not wrapped rows, so a
        // prompt wider than the terminal (many of accelerate's are) would leave half of itself behind:
        // such prompts are printed once, and the answer is typed on the line below.
        let width = self.term.size().1 as usize;
        let inline = console::measure_text_width(prompt) + 16 <= width;
        if !inline {
            self.term.write_line(prompt.trim_end())?;
        }
        Input::<String>::with_theme(&Verbatim)
            .with_prompt(if inline { prompt } else { "> " })
            .allow_empty(true)
            .interact_text_on(&self.term)
            .map_err(|dialoguer::Error::IO(e)| e)
    }

    fn say(&mut self, message: &str) {
        let _ = self.term.write_line(message);
    }
}

/// Prints a prompt exactly as given: accelerate's prompts end in their own `[default]: `.
struct Verbatim;

impl Theme for Verbatim {
    fn format_input_prompt(
        &self,
        f: &mut dyn fmt::Write,
        prompt: &str,
        _default: Option<&str>,
    ) -> fmt::Result {
        write!(f, "{prompt}")
    }

    fn format_input_prompt_selection(
        &self,
        f: &mut dyn fmt::Write,
        prompt: &str,
        sel: &str,
    ) -> fmt::Result {
        let sep = if prompt.ends_with(char::is_whitespace) {
            ""
        } else {
            " "
        };
        write!(f, "{prompt}{sep}{sel}")
    }
}

/// Answers from a list, for tests: `Pick(i)` for menus, `Text(s)` for lines. Records what was asked.
#[cfg(test)]
pub mod script {
    use super::*;
    use std::collections::VecDeque;

    #[derive(Debug, Clone)]
    pub enum Answer {
        /// Enter on a menu: its default.
        Enter,
        Pick(usize),
        Text(&'static str),
    }

    #[derive(Default)]
    pub struct Script {
        pub answers: VecDeque<Answer>,
        pub asked: Vec<String>,
        pub said: Vec<String>,
    }

    impl Script {
        pub fn new(answers: impl IntoIterator<Item = Answer>) -> Script {
            Script {
                answers: answers.into_iter().collect(),
                ..Script::default()
            }
        }
        fn next(&mut self, prompt: &str) -> io::Result<Answer> {
            self.asked.push(prompt.to_string());
            self.answers.pop_front().ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("script ran out of answers at {prompt:?}"),
                )
            })
        }
    }

    impl Ask for Script {
        fn menu(&mut self, prompt: &str, items: &[String], default: usize) -> io::Result<usize> {
            match self.next(prompt)? {
                Answer::Enter => Ok(default),
                Answer::Pick(i) if i < items.len() => Ok(i),
                other => Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("menu {prompt:?} {items:?} got {other:?}"),
                )),
            }
        }
        fn line(&mut self, prompt: &str) -> io::Result<String> {
            match self.next(prompt)? {
                Answer::Text(s) => Ok(s.to_string()),
                other => Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("question {prompt:?} got {other:?}"),
                )),
            }
        }
        fn say(&mut self, message: &str) {
            self.said.push(message.to_string());
        }
    }
}
