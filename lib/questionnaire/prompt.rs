//! The two widgets the questionnaire needs, behind a small trait so the question flow can be driven by
//! a script in unit tests and by the terminal for users.
//!
//! Menus are drawn here on `console` rather than with `dialoguer::Select`: accelerate's `BulletMenu`
//! moves to a row when its number key is pressed, and people who type `4⏎` for multi-GPU out of habit
//! must not silently get the default instead. Free-text answers are read key by key too, with simple
//! line editing (arrows, Home/End, Backspace/Delete): `dialoguer::Input` ignores Ctrl-D, which must end
//! the questionnaire as Ctrl-C does. Prompts are printed verbatim (they carry their own `[default]`).

use std::io;

use dialoguer::console::{self, style, Key, Term};

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
            let key = match t.read_key() {
                Ok(Key::Char('\u{4}')) => return Err(end_of_input(t)),
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(end_of_input(t)),
                other => other?,
            };
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
        // A prompt wider than the terminal would wrap, and redrawing the answer line would then leave
        // half of it behind: such prompts are printed once, and the answer is typed on the line below.
        let t = &self.term;
        let width = t.size().1 as usize;
        let shown = if console::measure_text_width(prompt) + 16 <= width {
            prompt
        } else {
            t.write_line(prompt.trim_end())?;
            "> "
        };
        t.write_str(shown)?;
        t.flush()?;
        let mut chars: Vec<char> = Vec::new();
        let mut pos = 0;
        loop {
            let key = match t.read_key() {
                Ok(key) => key,
                // Ctrl-D before the terminal was switched to raw mode reaches us as end of input.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(end_of_input(t)),
                Err(e) => return Err(e),
            };
            match key {
                Key::Enter => {
                    t.write_line("")?;
                    return Ok(chars.into_iter().collect());
                }
                // Ctrl-D: the user wants out, as with Ctrl-C (dialoguer's Input ignores it).
                Key::Char('\u{4}') => return Err(end_of_input(t)),
                Key::Char(c) if !c.is_control() => {
                    chars.insert(pos, c);
                    pos += 1;
                }
                Key::Backspace if pos > 0 => {
                    pos -= 1;
                    chars.remove(pos);
                }
                Key::Del if pos < chars.len() => {
                    chars.remove(pos);
                }
                Key::ArrowLeft if pos > 0 => pos -= 1,
                Key::ArrowRight if pos < chars.len() => pos += 1,
                Key::Home => pos = 0,
                Key::End => pos = chars.len(),
                _ => continue,
            }
            let text: String = chars.iter().collect();
            t.clear_line()?;
            t.write_str(shown)?;
            t.write_str(&text)?;
            t.move_cursor_left(chars.len() - pos)?;
            t.flush()?;
        }
    }

    fn say(&mut self, message: &str) {
        let _ = self.term.write_line(message);
    }
}

/// Ctrl-D ends the questionnaire as Ctrl-C does: by SIGINT, so nothing is written and the shell sees
/// the same status. When SIGINT is ignored (a background job), the error ends it with status 130.
fn end_of_input(t: &Term) -> io::Error {
    let _ = t.write_line("");
    // SAFETY: raise() is safe to call; the default SIGINT disposition ends the process here.
    unsafe {
        libc::raise(libc::SIGINT);
    }
    io::Error::new(io::ErrorKind::Interrupted, "end of input (Ctrl-D)")
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
