//! Job array indices (`--array=0-9%3`): which elements a task's array has, so the tracker knows
//! every element it must see end (Slurm lists only those it still has). Slurm's syntax: a comma
//! list of `N`, `A-B` and `A-B:S` items, then an optional `%N` limit on elements running at
//! once (which does not change the indices).

/// The largest index Slurm accepts (`MaxArraySize` is at most 4000001, so an index at most
/// 4000000).
const MAX_INDEX: u32 = 4_000_000;

/// The array's indices in increasing order, without duplicates; the error says what is wrong.
pub fn indices(expr: &str) -> Result<Vec<u32>, String> {
    let list = match expr.split_once('%') {
        Some((list, limit)) => {
            match limit.parse::<u32>() {
                Ok(n) if n > 0 => {}
                _ => {
                    return Err(format!(
                        "`%{limit}`: the running limit must be a positive number"
                    ));
                }
            }
            list
        }
        None => expr,
    };
    let num = |s: &str| -> Result<u32, String> {
        let n: u32 = s
            .parse()
            .map_err(|_| format!("`{s}` is not an index (a number from 0 to {MAX_INDEX})"))?;
        if n > MAX_INDEX {
            return Err(format!("index {n} is above Slurm's largest, {MAX_INDEX}"));
        }
        Ok(n)
    };
    let mut out = Vec::new();
    for item in list.split(',') {
        let (range, step) = match item.split_once(':') {
            Some((r, s)) => (r, num(s)?),
            None => (item, 1),
        };
        if step == 0 {
            return Err(format!("`{item}`: the step must be at least 1"));
        }
        let (a, b) = match range.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let n = num(range)?;
                (n, n)
            }
        };
        if a > b {
            return Err(format!("`{item}`: the range ends before it starts"));
        }
        out.extend((a..=b).step_by(step as usize));
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Indices in Slurm's syntax, runs of consecutive ones as ranges (`0-3,5,7-9`): what an array is
/// submitted with and what a task's meta names, short however many elements there are.
pub fn expr(indices: &[u32]) -> String {
    let mut sorted = indices.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut items: Vec<String> = Vec::new();
    let mut run: Option<(u32, u32)> = None;
    for i in sorted {
        run = match run {
            Some((a, b)) if b + 1 == i => Some((a, i)),
            Some(r) => {
                items.push(item(r));
                Some((i, i))
            }
            None => Some((i, i)),
        };
    }
    items.extend(run.map(item));
    items.join(",")
}

fn item((a, b): (u32, u32)) -> String {
    if a == b {
        a.to_string()
    } else {
        format!("{a}-{b}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expressions_read_back_as_their_indices() {
        for set in [
            vec![0u32],
            vec![0, 1, 2, 3],
            vec![0, 2, 4],
            vec![0, 1, 2, 5, 7, 8, 9, 100],
            (0..1000).collect(),
        ] {
            assert_eq!(indices(&expr(&set)).unwrap(), set, "{set:?}");
        }
        assert_eq!(expr(&[9, 7, 8, 0, 1, 2, 3, 5]), "0-3,5,7-9");
        assert_eq!(expr(&(0..1000).collect::<Vec<_>>()), "0-999");
    }

    #[test]
    fn slurms_syntax() {
        assert_eq!(indices("0-9%3").unwrap(), (0..10).collect::<Vec<_>>());
        assert_eq!(indices("1,3,5").unwrap(), vec![1, 3, 5]);
        assert_eq!(indices("0-15:4").unwrap(), vec![0, 4, 8, 12]);
        assert_eq!(indices("7,1-3,2").unwrap(), vec![1, 2, 3, 7]);
        assert_eq!(indices("4").unwrap(), vec![4]);
        for bad in [
            "", "3-1", "x", "1-", "0-9%0", "0-9%", "0-4:0", "1,,2", "5000000",
        ] {
            assert!(indices(bad).is_err(), "{bad}");
        }
    }
}
