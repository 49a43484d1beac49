//! Which of the compiler's arguments go to the frontend, the back end and the link, so that
//! instrumenting between them changes nothing the user asked for.

use std::ffi::OsStr;
use std::path::Path;

use crate::CcError;

/// Options whose value is the next argument.
const WITH_VALUE: &[&str] = &[
    "-o",
    "-I",
    "-D",
    "-U",
    "-include",
    "-imacros",
    "-isystem",
    "-idirafter",
    "-iquote",
    "-isysroot",
    "-MF",
    "-MT",
    "-MQ",
    "-x",
    "-Xclang",
    "-Xlinker",
    "-L",
    "-l",
    "-target",
    "--sysroot",
    "-arch",
    "-Xpreprocessor",
    "-Xassembler",
    "-z",
    "-T",
    "-u",
    "-e",
];

const SOURCE_EXT: &[&str] = &["c", "cc", "cp", "cxx", "cpp", "c++", "C", "CPP", "i", "ii"];

fn is_source(p: &Path) -> bool {
    p.extension()
        .and_then(OsStr::to_str)
        .is_some_and(|e| SOURCE_EXT.contains(&e))
}

/// Where an argument goes.
#[derive(Clone, Copy, PartialEq)]
enum Dest {
    /// Preprocessing and language options: the frontend only.
    Front,
    /// Code generation (-m*, -f*, -g*, -target): frontend and back end.
    Both,
    /// Linker options.
    Link,
}

fn classify(a: &str) -> Dest {
    if a.starts_with("-l")
        || a.starts_with("-L")
        || a.starts_with("-Wl,")
        || a == "-Xlinker"
        || a == "-z"
        || a == "-T"
        || matches!(
            a,
            "-shared"
                | "-static"
                | "-pie"
                | "-no-pie"
                | "-rdynamic"
                | "-s"
                | "-nostdlib"
                | "-nostartfiles"
                | "-static-libgcc"
                | "-static-libstdc++"
                | "-u"
                | "-e"
        )
        || a.starts_with("-fuse-ld")
    {
        Dest::Link
    } else if a.starts_with("-m")
        || a.starts_with("-f")
        || a.starts_with("-g")
        || a == "-target"
        || a.starts_with("--target")
        || a == "-pthread"
        || a == "-arch"
        || a.starts_with("--sysroot")
    {
        Dest::Both
    } else {
        Dest::Front
    }
}

/// A command line sorted for the three steps.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// Frontend (preprocessing, language) options.
    pub front: Vec<String>,
    /// Code-generation options, given to the back end too.
    pub back: Vec<String>,
    /// Options for the link only.
    pub link: Vec<String>,
    /// Inputs in order, with the linker options that must stay among them; sources are
    /// replaced by their objects at link time.
    pub inputs: Vec<String>,
    /// `-o`.
    pub output: Option<String>,
    /// The user's `-O` level (applied after instrumenting).
    pub level: String,
    /// `-c`.
    pub compile_only: bool,
    /// `-S`.
    pub asm_only: bool,
    /// Debug information asked for (else line tables are added, which add no IR instruction).
    pub user_g: bool,
    /// `-MD` / `-MMD`.
    pub dep_file: bool,
}

impl Plan {
    /// The sources among the inputs.
    pub fn sources(&self) -> Vec<String> {
        self.inputs
            .iter()
            .filter(|s| !s.starts_with('-') && is_source(Path::new(s)))
            .cloned()
            .collect()
    }
}

/// Sorts the compiler's arguments (without the compiler itself).
pub(crate) fn plan(args: &[String]) -> Result<Plan, CcError> {
    let mut p = Plan {
        level: "-O0".to_string(),
        ..Plan::default()
    };
    let mut i = 0;
    while i < args.len() {
        let x = &args[i];
        let value = || {
            args.get(i + 1)
                .cloned()
                .ok_or_else(|| CcError::Invalid(format!("{x} needs a value")))
        };
        match x.as_str() {
            "-c" => p.compile_only = true,
            "-S" => p.asm_only = true,
            "-o" => {
                p.output = Some(value()?);
                i += 1;
            }
            "-x" => bail!("-x is not supported by bbv cc: name sources by their extension"),
            "-emit-llvm" => bail!("-emit-llvm is not supported by bbv cc"),
            "-MD" | "-MMD" => {
                p.dep_file = true;
                p.front.push(x.clone());
            }
            s if s.starts_with("-O") => p.level = s.to_string(),
            s if s.starts_with("-o") && s.len() > 2 => p.output = Some(s[2..].to_string()),
            s if s.starts_with('-') && s.len() > 1 => {
                if s.starts_with("-g") && s != "-g0" {
                    p.user_g = true;
                }
                let dest = classify(s);
                let mut group = vec![x.clone()];
                if WITH_VALUE.contains(&s) {
                    group.push(value()?);
                    i += 1;
                }
                match dest {
                    Dest::Front => p.front.extend(group),
                    Dest::Both => {
                        p.front.extend(group.iter().cloned());
                        p.back.extend(group.iter().cloned());
                        p.link.extend(group);
                    }
                    Dest::Link => {
                        // Keep -l/-L and friends in order with the inputs.
                        p.inputs.extend(group);
                    }
                }
            }
            _ => p.inputs.push(x.clone()),
        }
        i += 1;
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_go_where_they_act() {
        let args: Vec<String> = "-O3 -DX=1 -I inc -march=native -g -c a.c -o a.o -lm"
            .split(' ')
            .map(String::from)
            .collect();
        let p = plan(&args).unwrap();
        assert_eq!(p.level, "-O3");
        assert_eq!(p.front, ["-DX=1", "-I", "inc", "-march=native", "-g"]);
        assert_eq!(p.back, ["-march=native", "-g"]);
        assert_eq!(p.inputs, ["a.c", "-lm"]);
        assert_eq!(p.sources(), ["a.c"]);
        assert_eq!(p.output.as_deref(), Some("a.o"));
        assert!(p.compile_only && p.user_g && !p.asm_only);
        assert!(matches!(plan(&["-o".into()]), Err(CcError::Invalid(_))));
        assert!(plan(&["-x".into(), "c".into()]).is_err());
    }
}
