//! Text tables whose columns are as wide as their widest cell: fixed widths misalign as
//! soon as a figure or a target's name outgrows them.

/// Where a column's cells sit.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Align {
    /// Text.
    Left,
    /// Figures.
    Right,
}

/// A header row and its rows.
#[derive(Debug)]
pub(crate) struct Table {
    heads: Vec<(String, Align)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    pub(crate) fn new(heads: &[(&str, Align)]) -> Table {
        Table {
            heads: heads.iter().map(|(h, a)| ((*h).to_owned(), *a)).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells are blank, extra ones dropped).
    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The header and the rows, each line after `indent`, columns two spaces apart, no
    /// trailing blanks.
    pub(crate) fn render(&self, indent: &str) -> String {
        let len = |s: &str| s.chars().count();
        let widths: Vec<usize> = (0..self.heads.len())
            .map(|i| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(i))
                    .map(|c| len(c))
                    .chain([len(&self.heads[i].0)])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: Vec<&str>| {
            let padded: Vec<String> = cells
                .iter()
                .zip(&self.heads)
                .zip(&widths)
                .map(|((c, (_, align)), w)| {
                    let pad = " ".repeat(w - len(c));
                    match align {
                        Align::Left => format!("{c}{pad}"),
                        Align::Right => format!("{pad}{c}"),
                    }
                })
                .collect();
            format!("{indent}{}\n", padded.join("  ").trim_end())
        };
        let mut out = line(self.heads.iter().map(|(h, _)| h.as_str()).collect());
        for r in &self.rows {
            out += &line(
                (0..self.heads.len())
                    .map(|i| r.get(i).map_or("", String::as_str))
                    .collect(),
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every column starts (left) or ends (right) at the same place on every line, however
    /// wide its cells.
    #[test]
    fn columns_line_up_whatever_the_cells() {
        let mut t = Table::new(&[("name", Align::Left), ("µs", Align::Right)]);
        t.row(vec!["a long name".into(), "1.5".into()]);
        t.row(vec!["b".into(), "12345.25".into()]);
        assert_eq!(
            t.render("  "),
            "  name               µs\n  a long name       1.5\n  b            12345.25\n"
        );
    }
}
