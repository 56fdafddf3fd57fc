"""Walks the tree-sitter-bash syntax tree of a line, and the payloads it runs, into simple commands."""

from __future__ import annotations

import posixpath
import re
from typing import Any

import tree_sitter
import tree_sitter_bash

from gateway.policy.facts import code as codemod
from gateway.policy.facts import effects as effectmod
from gateway.policy.facts import paths as pathmod
from gateway.policy.facts.shell import wordnodes, wrappers
from gateway.policy.facts.shell.command import (
    COPIERS,
    DOWNLOADERS,
    SHELLS,
    Command,
    State,
    is_interpreter,
    unique,
)
from gateway.policy.facts.shell.expand import (
    adjacent,
    escaped_tail,
    fed_text,
    gap_tokens,
    heredoc_text,
    pipe_nodes,
)
from gateway.policy.facts.shell.inline import (
    INLINE_FLAGS,
    has_inline_code,
    script_operand,
)
from gateway.policy.facts.words import (
    Word,
    brace_expand,
    field_split,
    unquoted,
)

MAX_BYTES = 65536
"""Longer commands are not parsed (``unparsed`` with reason ``too-large``)."""
MAX_DEPTH = 6
"""Nesting of ``bash -c``/``eval``/substitutions beyond which parsing stops (``too-deep``)."""
MAX_COMMANDS = 512

_LANGUAGE = tree_sitter.Language(tree_sitter_bash.language())

_SPECIAL = re.compile(r"[^A-Za-z0-9 \t,._+:@%/=-]")
"""Any character outside this set may quote, expand, redirect or separate: the full parser runs."""
_BLANKS = frozenset(" \t\n")
"""The default ``IFS``."""
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\+)?=")


class Walker:
    """Walks the syntax tree of one command line (and, recursively, its payloads)."""

    def __init__(self, home: str) -> None:
        self.parser = tree_sitter.Parser(_LANGUAGE)
        self.commands: list[Command] = []
        self.unparsed: list[str] = []
        self.home = home
        self.feed: str | None = None
        """Static text the next simple command reads on stdin (``echo ... | xargs``)."""
        self.called: set[str] = set()
        """Shell functions called (the others are walked at the end, :meth:`uncalled`)."""
        self.defined: list[tuple[dict[str, str], int]] = []

    def resolve(self, cmd: Command, src: bytes, st: State, depth: int) -> list[Command]:
        """``cmd`` through its wrappers to the program it runs (:mod:`wrappers`)."""
        return wrappers.resolve(self, cmd, src, st, depth)

    def word(self, n: tree_sitter.Node, src: bytes, st: State, depth: int) -> Word:
        """One word (:mod:`wordnodes`)."""
        return wordnodes.word(self, n, src, st, depth)

    def uncalled(self, state: State) -> None:
        """Functions defined but never called in the line: their bodies, with unknown arguments."""
        seen: set[str] = set()
        for functions, depth in self.defined:
            for name, body in list(functions.items()):
                if name not in self.called and name not in seen:
                    seen.add(name)
                    self.parse(body, state.copy(), depth, "function")

    # ---- entry ----------------------------------------------------------------------------
    def parse(self, text: str, state: State, depth: int, context: str) -> list[Command]:
        """Commands of ``text``; appended to ``self.commands`` too."""
        if depth > MAX_DEPTH:
            self.unparsed.append("too-deep")
            return []
        data = text.encode("utf-8", "surrogatepass")
        if len(data) > MAX_BYTES:
            self.unparsed.append("too-large")
            return []
        if not _SPECIAL.search(text) and (tokens := text.split()) and not _ASSIGNMENT.match(tokens[0]):
            # no quoting, expansion or operator: bash splits at blanks, nothing else (fast path)
            cmd = Command([Word(t, "0" * len(t)) for t in tokens], state, depth, context)
            return self.resolve(cmd, data, state, depth)
        tree = self.parser.parse(data)
        if tree.root_node.has_error:
            self.unparsed.append("syntax")
        return self.node(tree.root_node, data, state, depth, context)

    # ---- statements -----------------------------------------------------------------------
    def node(self, n: tree_sitter.Node, src: bytes, st: State, depth: int, ctx: str) -> list[Command]:
        t = n.type
        if len(self.commands) > MAX_COMMANDS:
            self.unparsed.append("too-many")
            return []
        if t == "command":
            return self.command(n, src, st, depth, ctx, [])
        if t == "program" or t == "list":  # (the usual containers, as the default below: their children)
            return self.children(n, src, st, depth, ctx)
        if t == "redirected_statement":
            body = n.child_by_field_name("body")
            redirs = [c for c in n.children if c is not body and c.type.endswith("redirect")]
            rest: list[tree_sitter.Node] = []
            after: list[tree_sitter.Node] = []
            for r in redirs if b"<<" in src[n.start_byte : n.end_byte] else []:
                if r.type != "heredoc_redirect":
                    continue
                # the grammar puts what follows `cmd <<EOF` on the same line inside the heredoc
                # redirect: more redirects, the rest of the pipeline, the rest of a list
                right = {x.id for x in r.children_by_field_name("right")}
                for part in r.named_children:
                    if part.type.endswith("redirect"):
                        redirs.append(part)
                    elif part.type in ("heredoc_start", "heredoc_body", "heredoc_end"):
                        continue
                    elif part.type == "pipeline" and part.id not in right and not rest:
                        rest = pipe_nodes(part)
                    else:
                        after.append(part)
            if rest or after:
                first = (
                    self.command(body, src, st, depth, ctx, redirs)
                    if body is not None and body.type == "command"
                    else self.node(body, src, st, depth, ctx)
                    if body is not None
                    else []
                )
                found = self.pipe(rest, src, st, depth, ctx, first) if rest else first
                for a in after:
                    found += self.node(a, src, st, depth, ctx)
                return found
            if body is not None and body.type == "command":
                return self.command(body, src, st, depth, ctx, redirs)
            if body is not None and body.type == "pipeline":
                # `a | b > f`: the grammar puts the redirect on the pipeline, bash on its last command
                return self.pipe(pipe_nodes(body), src, st, depth, ctx, last_redirs=redirs)
            inner = self.node(body, src, st, depth, ctx) if body is not None else []
            return self.redirect_all(inner, redirs, src, st, depth, ctx)
        if t == "pipeline":
            return self.pipeline(n, src, st, depth, ctx)
        if t == "variable_assignment":
            self.assign(n, src, st, depth, ctx)
            return []
        if t in ("declaration_command", "unset_command"):
            printed: list[Word] = []
            for part in n.named_children:
                if part.type == "variable_assignment":
                    self.assign(part, src, st, depth, ctx)
                else:
                    printed.append(self.word(part, src, st, depth))
            keyword = n.children[0].text.decode() if n.children and n.children[0].text else ""
            if (
                t == "declaration_command"
                and len(printed) == n.named_child_count
                and all(w.text.startswith("-") for w in printed)
            ):  # `export -p`, `declare -x`: a command that prints variables, not an assignment
                cmd = Command([Word(keyword, "0" * len(keyword)), *printed], st, depth, ctx)
                return self.resolve(cmd, src, st, depth)
            return []
        if t == "subshell":
            return self.children(n, src, st.copy(), depth, ctx)
        if t == "function_definition":
            body = n.child_by_field_name("body")
            name_node = n.child_by_field_name("name")
            if body is None:
                return []
            if name_node is None or not name_node.text:
                return self.node(body, src, st.copy(), depth, "function")
            # walked when it is called (with its arguments), or at the end if it never is
            st.functions[name_node.text.decode("utf-8", "replace")] = src[body.start_byte : body.end_byte].decode(
                "utf-8", "replace"
            )
            self.defined.append((st.functions, depth))
            return []
        if t in ("for_statement", "select_statement"):
            var = n.child_by_field_name("variable")
            if var is not None:
                st.vars[var.text.decode() if var.text else ""] = Word(dynamic=True)
            return self.children(n, src, st, depth, ctx, skip_words=True)
        if t in ("heredoc_body", "comment", "heredoc_start", "heredoc_end"):
            return []
        if t == "ERROR":
            raw = src[n.start_byte : n.end_byte].decode("utf-8", "replace")
            if raw.startswith("{") and "," in raw.split("}", 1)[0]:
                # `{cat,.env}`: brace expansion in command position, which the grammar rejects
                words: list[Word] = []
                for token in raw.split():
                    w = Word()
                    unquoted(token, w)
                    words.extend(self.split(w, st))
                return self.resolve(Command(words, st, depth, ctx), src, st, depth)
            return self.children(n, src, st, depth, ctx)
        return self.children(n, src, st, depth, ctx)

    def children(
        self, n: tree_sitter.Node, src: bytes, st: State, depth: int, ctx: str, *, skip_words: bool = False
    ) -> list[Command]:
        out: list[Command] = []
        for c in n.named_children:
            kind = c.type
            if skip_words and kind in ("word", "string", "raw_string", "concatenation", "variable_name"):
                self.word(c, src, st, depth)  # substitutions inside still run
                continue
            if kind in ("command_substitution", "process_substitution", "string", "expansion", "simple_expansion"):
                self.word(c, src, st, depth)
                continue
            out += self.node(c, src, st, depth, ctx)
        return out

    def pipeline(self, n: tree_sitter.Node, src: bytes, st: State, depth: int, ctx: str) -> list[Command]:
        return self.pipe(n.named_children, src, st, depth, ctx)

    def redirect_all(
        self, inner: list[Command], redirs: list[tree_sitter.Node], src: bytes, st: State, depth: int, ctx: str
    ) -> list[Command]:
        """``redirs`` of a compound command apply to every command in it (``while read l; do ...;
        done < .env``: every command of the body sees it)."""
        extra = Command([], st, depth, ctx)
        self.redirections(redirs, src, st, depth, extra)
        reads = [r["path"] for r in extra.redirects if r.get("path") and r["op"] in ("<", "<>")]
        for c in inner:
            c.redirects += extra.redirects
            c.code_from += extra.code_from
            c.stdin_from = unique([*c.stdin_from, *extra.stdin_from])
            if c.fact:
                c.fact["paths"] = unique([*c.fact["paths"], *reads])
                self.finish_code(c, src, depth)
        return inner

    def pipe(
        self,
        nodes: list[tree_sitter.Node],
        src: bytes,
        st: State,
        depth: int,
        ctx: str,
        first: list[Command] | None = None,
        last_redirs: list[tree_sitter.Node] | None = None,
    ) -> list[Command]:
        """A pipeline's elements; ``last_redirs``: the redirects of its last command."""
        elements: list[list[Command]] = [first] if first is not None else []
        for k, c in enumerate(nodes):
            self.feed = fed_text(elements[-1][0]) if elements and len(elements[-1]) == 1 else None
            here = st.copy() if elements else st
            if last_redirs and k == len(nodes) - 1:
                if c.type == "command":
                    elements.append(self.command(c, src, here, depth, ctx, list(last_redirs)))
                else:
                    elements.append(
                        self.redirect_all(self.node(c, src, here, depth, ctx), last_redirs, src, here, depth, ctx)
                    )
            else:
                elements.append(self.node(c, src, here, depth, ctx))
            self.feed = None
        out: list[Command] = []
        for i, element in enumerate(elements):
            upstream = [cmd for e in elements[:i] for cmd in e]
            downstream = elements[i + 1] if i + 1 < len(elements) else []
            feeders = unique(p for u in upstream for p in (u.program, *u.fact.get("_inputs", [])) if p)
            readers = [d.program for d in downstream if d.program]
            for cmd in element:  # (both lists never repeat a program: nothing added, nothing changes)
                if feeders:
                    cmd.stdin_from = unique([*cmd.stdin_from, *feeders])
                if readers:
                    cmd.stdout_to = unique([*cmd.stdout_to, *readers])
                if i > 0 and len(elements[i - 1]) == 1 and cmd.stdin_text is None:
                    cmd.stdin_text = fed_text(elements[i - 1][0])
            out += element
        for cmd in out:
            self.finish_code(cmd, src, depth)
        return out

    def assign(
        self, n: tree_sitter.Node, src: bytes, st: State, depth: int, ctx: str, tail: tree_sitter.Node | None = None
    ) -> None:
        name_node = n.child_by_field_name("name")
        name = name_node.text.decode() if name_node is not None and name_node.text else ""
        if tail is not None:  # continuation of the value parsed as a separate node
            if name and name in st.vars:
                st.vars[name].extend(self.word(tail, src, st, depth))
            return
        value_node = n.child_by_field_name("value")
        if value_node is not None and value_node.type == "array":  # `a=(rm -rf /)`
            items = [x for c in value_node.named_children for x in self.split(self.word(c, src, st, depth), st)]
            appending = src[n.start_byte : value_node.start_byte].endswith(b"+=")
            st.arrays[name] = [*(st.arrays.get(name, []) if appending else []), *items]
            st.vars[name] = st.arrays[name][0] if st.arrays[name] else Word()
            return
        value = self.word(value_node, src, st, depth) if value_node is not None else Word()
        if name and "[" not in name:
            st.vars[name] = value
            st.arrays.pop(name, None)

    # ---- one simple command ---------------------------------------------------------------
    def command(
        self, n: tree_sitter.Node, src: bytes, st: State, depth: int, ctx: str, redirs: list[tree_sitter.Node]
    ) -> list[Command]:
        feed, self.feed = self.feed, None
        # the state this command's own assignments (`X=1 cmd`, `${X:=v}`) go to; without a `=` in
        # its text it makes none, and its words read the line's state as it is (no copy)
        source = src[n.start_byte : n.end_byte]
        local = st.copy() if b"=" in source else st
        args: list[tree_sitter.Node] = []
        prefix_assign = False
        last: tree_sitter.Node | None = None  # the assignment whose value may go on in the next node
        end = -1  # where the last piece of that value ends: a node starting there continues it
        for c in n.children:
            if not c.is_named:
                if c.type == "$" and c.text != b"$":  # an escaped `\$` the grammar leaves anonymous
                    args.append(c)
                continue
            kind = c.type
            if last is not None and c.start_byte == end and not kind.endswith("redirect"):
                # tree-sitter-bash ends `B='m'\a'i'\n` after 'm' and splits the rest into more
                # nodes: every touching one is still the value
                self.assign(last, src, local, depth, ctx, tail=c)
                end = c.end_byte
                continue
            last = None
            if kind == "variable_assignment":
                self.assign(c, src, local, depth, ctx)
                prefix_assign = True
                last, end = c, c.end_byte
            elif kind.endswith("redirect"):
                redirs.append(c)
            elif kind == "command_name":
                args.extend(c.named_children or [c])
            else:
                args.append(c)
        raw_words: list[Word] = []
        groups = adjacent(args, src)
        escapes = b"\\" in source  # (the gaps between its words are inside its text)
        prefix: Word | None = None
        join = False
        for index, group in enumerate(groups):
            if index > 0 and escapes and b"\\" in (gap := src[groups[index - 1][-1].end_byte : group[0].start_byte]):
                # the grammar drops escaped blanks (`\ `) between words: put them back
                for text, touches_prev, touches_next in gap_tokens(gap.decode("utf-8", "replace")):
                    piece = Word()
                    unquoted(text, piece)
                    if touches_prev and raw_words:
                        raw_words[-1].extend(piece)
                        join = touches_next
                    elif touches_next:
                        prefix = piece
                    else:
                        raw_words.append(piece)
            if not join and prefix is None and len(group) == 1:
                raw_words.append(wordnodes.word(self, group[0], src, local, depth))  # one node: its word as it is
                continue
            word = raw_words[-1] if join else (prefix or Word())
            for part in group:
                word.extend(wordnodes.word(self, part, src, local, depth))
            if not join:
                raw_words.append(word)
            prefix, join = None, False
        if groups and b"\\" in (tail := escaped_tail(src, groups[-1][-1].end_byte)):
            for text, touches_prev, _ in gap_tokens(tail.decode("utf-8", "replace")):
                piece = Word()
                unquoted(text, piece)
                if touches_prev:
                    raw_words[-1].extend(piece)
                else:
                    raw_words.append(piece)
        words = [w for raw in raw_words for w in self.split(raw, local)]
        if not words and prefix_assign:
            st.vars.update(local.vars)  # a bare `X=1` keeps X for the rest of the line
            return []
        cmd = Command(words, local if prefix_assign else st, depth, ctx)
        cmd.stdin_text = feed
        if redirs:
            self.redirections(redirs, src, st, depth, cmd)
        out = self.resolve(cmd, src, st, depth)
        printed = fed_text(cmd) if cmd.out_readers else None
        for reader in cmd.out_readers:  # `echo ... > >(sh)`
            reader.stdin_from = unique([*reader.stdin_from, cmd.program])
            if reader.stdin_text is None:
                reader.stdin_text = printed
            self.finish_code(reader, src, reader.depth - 1)
        for w in words:  # the commands of its `>(...)` words (rare)
            if w.readers:
                out += w.readers
        return out

    def split(self, word: Word, st: State | None = None) -> list[Word]:
        """Brace expansion of one word (and field splitting of unquoted substituted text, at the
        characters of ``IFS`` when the line set it)."""
        if word.dynamic or "0" not in word.mask:
            return [word]
        ifs = " \t\n"
        given = st.vars.get("IFS") if st is not None else None
        if given is not None and not given.dynamic:
            ifs = given.text
        if word.text and "{" not in word.text and (_BLANKS if ifs == " \t\n" else set(ifs)).isdisjoint(word.text):
            return [word]  # nothing to expand or split (the usual word): itself, not a copy
        expanded = brace_expand(word.text, word.mask)
        if expanded is None:
            return [
                Word(word.text, word.mask, True, word.sources, word.procsub, readers=word.readers, output=word.output)
            ]
        fields = [f for t, m in expanded for f in field_split(t, m, ifs)]
        return [
            Word(t, m, word.dynamic, word.sources, word.procsub, readers=word.readers, output=word.output)
            for t, m in fields
        ]

    def redirections(self, redirs: list[tree_sitter.Node], src: bytes, st: State, depth: int, cmd: Command) -> None:
        for r in redirs:
            op = ""
            fd = ""
            target: Word | None = None
            for c in r.children:
                kind = c.type
                if kind == "file_descriptor":
                    fd = c.text.decode() if c.text else ""
                elif kind == "ERROR" and c.text in (b"<", b">"):  # tree-sitter-bash has no `<>`
                    op += c.text.decode()
                elif not c.is_named:
                    text = c.text.decode() if c.text else ""
                    op = op + text if op == "<" and text == ">" else (op or text)
                elif kind == "heredoc_body":
                    body = c.text.decode() if c.text else ""
                    quoted = any(
                        ch.type == "heredoc_start" and ch.text is not None and ch.text[:1] in (b"'", b'"', b"\\")
                        for ch in r.children
                    )
                    cmd.stdin_text = body if quoted or ("$" not in body and "`" not in body) else heredoc_text(body, st)
                    if cmd.stdin_text is None:
                        cmd.dynamic = True
                elif r.type != "heredoc_redirect" and kind not in ("heredoc_start", "heredoc_end") and target is None:
                    target = self.word(c, src, st, depth)
            if r.type == "herestring_redirect" and target is not None:
                cmd.stdin_text = None if target.dynamic else target.text
                cmd.code_from += target.sources
                if target.dynamic:
                    cmd.dynamic = True
                continue
            if r.type == "heredoc_redirect":
                continue
            text = target.text if target is not None else ""
            entry: dict[str, Any] = {"op": op, "fd": fd, "target": text, "dynamic": bool(target and target.dynamic)}
            if target is not None and not target.dynamic and not op.endswith("&"):
                entry["path"] = pathmod.normalize(text, st.cwd, st.home, shell=True)
            if op == "<" and entry.get("path") in st.scripts:  # `echo ... > f; sh < f`
                cmd.stdin_text = st.scripts[entry["path"]]
            elif op == "<" and entry.get("path") in st.downloads:
                cmd.stdin_from = unique([*cmd.stdin_from, st.downloads[entry["path"]]])
            if target is not None and target.procsub and op.startswith("<"):
                cmd.stdin_from = unique([*cmd.stdin_from, *target.sources])
                if target.output is not None:
                    cmd.stdin_text = target.output  # `sh < <(echo ...)`
            if target is not None and target.procsub and op.startswith(">"):
                cmd.out_readers += target.readers
            cmd.redirects.append(entry)

    # ---- wrappers, payloads ---------------------------------------------------------------
    def payload(
        self, cmd: Command, script: Word, src: bytes, st: State, depth: int, positional: dict[str, Word] | None = None
    ) -> list[Command]:
        cmd.code_from = unique([*cmd.code_from, *script.sources])
        if script.dynamic:
            cmd.dynamic = True
            return []
        inner = st.copy()
        if positional is not None:
            inner.vars = {k: v for k, v in inner.vars.items() if not k.isdigit()} | positional
            inner.arrays = {
                **inner.arrays,
                "@": [positional[str(k)] for k in range(1, len(positional)) if str(k) in positional],
            }
        return self.parse(script.text, inner, depth + 1, "payload")

    def run_code(self, cmd: Command, language: str, code: Word, src: bytes, st: State, depth: int) -> list[Command]:
        """Inline code: the command lines it runs are parsed as payloads, what it does to files
        and hosts becomes ``cmd.code_effects``; code known only at run time is ``exec`` unknown."""
        via = [*cmd.wrappers, language]
        if code.dynamic:
            if not code.sources:  # `python -c "$CODE"` (downloaded code is `code_from`)
                cmd.code_effects.append(
                    effectmod.effect("exec", cmd.program, via, source="unknown", certainty="unknown")
                )
            return []
        found = codemod.analyze(language, code.text)
        out: list[Command] = []
        for line in found.commands:
            out += self.payload(cmd, Word(line, "1" * len(line)), src, st, depth)
        for kind, value, recursive in found.touches:
            if kind == codemod.STDIN_CODE:  # `curl ... | python3 -c 'exec(sys.stdin.read())'`
                cmd.evals_stdin = True
                kind = "exec"
            cmd.code_effects.append(effectmod.of_code(kind, value, recursive, cmd.program, via, st.cwd, st.home))
        return out

    def finish_code(self, cmd: Command, src: bytes, depth: int) -> None:
        """Programs whose output ``cmd`` runs as code, and a static stdin script parsed as one."""
        program = cmd.program
        if is_interpreter(program) or program in ("source", "."):
            argw = cmd.words[cmd.start + 1 :]
            args = [w.text for w in argw]
            script_at = script_operand(program, args)
            if program in SHELLS and any(a.startswith("-") and not a.startswith("--") and "s" in a[1:] for a in args):
                script_at = None
            reads_stdin = script_at is None and program not in ("source", ".") and not has_inline_code(program, args)
            if "xargs" in cmd.wrappers and program in SHELLS and args and re.fullmatch(r"-[a-z]*c", args[-1]):
                cmd.code_from = unique([*cmd.code_from, *cmd.stdin_from])  # `curl … | xargs -0 sh -c`
            if script_at is not None:
                w = argw[script_at]
                if w.procsub and w.output is not None:
                    self.run_script(cmd, w.output, src, depth)
                elif w.procsub:
                    cmd.code_from = unique([*cmd.code_from, *w.sources])
                elif w.text in ("-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"):
                    reads_stdin = True
                else:
                    target = pathmod.normalize(w.text, cmd.state.cwd, cmd.state.home, shell=True)
                    if target in cmd.state.downloads:
                        cmd.code_from = unique([*cmd.code_from, cmd.state.downloads[target]])
                    if target in cmd.state.scripts:  # `echo ... > f.sh && bash f.sh`
                        self.run_script(cmd, cmd.state.scripts[target], src, depth)
            for k, a in enumerate(args[:-1]):
                if a in INLINE_FLAGS or (
                    a.startswith("-") and not a.startswith("--") and a[-1:] in "ce" and len(a) <= 4
                ):
                    cmd.code_from = unique([*cmd.code_from, *argw[k + 1].sources])
            if reads_stdin and (cmd.stdin_text is None or not (program in SHELLS or codemod.language_of(program))):
                cmd.code_from = unique([*cmd.code_from, *cmd.stdin_from])
            if reads_stdin:
                if cmd.stdin_text is not None and program in SHELLS and not cmd.fact.get("_stdin_parsed"):
                    cmd.fact["_stdin_parsed"] = True
                    self.parse(cmd.stdin_text, cmd.state.copy(), depth + 1, "payload")
                language = codemod.language_of(program)
                if cmd.stdin_text is not None and language is not None and not cmd.fact.get("_stdin_parsed"):
                    cmd.fact["_stdin_parsed"] = True  # `python3 - <<'EOF' ... EOF`
                    text = cmd.stdin_text
                    self.run_code(cmd, language, Word(text, "1" * len(text)), src, cmd.state, depth)
        elif cmd.start < len(cmd.words) and cmd.words[cmd.start].dynamic:
            cmd.code_from = unique([*cmd.code_from, *cmd.words[cmd.start].sources])  # `$(curl ...)` as a command
        elif cmd.start < len(cmd.words) and "/" in cmd.words[cmd.start].text:  # a program run by its path
            target = pathmod.normalize(cmd.words[cmd.start].text, cmd.state.cwd, cmd.state.home, shell=True)
            if target in cmd.state.downloads:
                cmd.code_from = unique([*cmd.code_from, cmd.state.downloads[target]])
            if target in cmd.state.scripts:  # `chmod +x f && ./f`
                self.run_script(cmd, cmd.state.scripts[target], src, depth)

        if program in ("at", "batch") and cmd.stdin_text is not None and not cmd.fact.get("_stdin_parsed"):
            cmd.fact["_stdin_parsed"] = True  # `at now <<< '...'`: the commands it runs later
            self.parse(cmd.stdin_text, cmd.state.copy(), depth + 1, "payload")
        if cmd.evals_stdin:  # its inline code runs what it reads: whatever feeds its stdin
            cmd.code_from = unique([*cmd.code_from, *cmd.stdin_from])
        if cmd.fact:
            cmd.fact["code_from"] = cmd.code_from
            cmd.fact["stdin_from"] = cmd.stdin_from
            cmd.fact["stdout_to"] = cmd.stdout_to
            cmd.fact["dynamic"] = cmd.fact["dynamic"] or cmd.dynamic

    def run_script(self, cmd: Command, text: str, src: bytes, depth: int) -> None:
        """Static script text a shell or interpreter runs (from a file written earlier in the line
        or a ``<(echo ...)``), parsed once."""
        if cmd.fact.get("_script_parsed"):
            return
        cmd.fact["_script_parsed"] = True
        language = codemod.language_of(cmd.program)
        if cmd.program in SHELLS or cmd.program in ("source", ".") or language is None:
            self.parse(text, cmd.state.copy(), depth + 1, "payload")
        else:
            self.run_code(cmd, language, Word(text, "1" * len(text)), src, cmd.state, depth)

    def change_dir(self, args: list[Word], st: State) -> None:
        operands = [a for a in args if not (a.text.startswith("-") and len(a.text) > 1)]
        if not operands:
            st.cwd = st.home if st.home != "~" else "~"
        elif operands[0].dynamic or operands[0].text == "-":
            st.cwd = ""
        else:
            base = st.cwd
            text = operands[0].text
            if not base and not text.startswith(("/", "~")):
                st.cwd = ""
            else:
                st.cwd = pathmod.normalize(text, base, st.home, shell=True)

    def track_files(self, cmd: Command, st: State) -> None:
        """Copies (``cp a b``, ``cat a > b``) and downloads (``curl -o f``, ``wget``, ``> f``)."""
        fact = cmd.fact
        program = cmd.program
        outs = [
            r["path"]
            for r in cmd.redirects
            if r.get("path") and r["op"] in (">", ">>", ">|", "&>", "&>>") and r["fd"] in ("", "1")
        ]
        if not outs and program != "tee" and program not in DOWNLOADERS and program not in COPIERS:
            return  # it writes no file
        if program in DOWNLOADERS:
            written = list(outs)
            values: dict[str, list[str]] = fact.get("_values", {})
            for key in ("-o", "--output", "-O", "--output-document"):
                written += [pathmod.normalize(v, st.cwd, st.home, shell=True) for v in values.get(key, []) if v != "-"]
            if ("-O" in fact["options"] and program == "curl") or (program == "wget" and not values.get("-O")):
                for url in fact["operands"]:
                    name = posixpath.basename(url.split("?", 1)[0].rstrip("/")) if "://" in url else ""
                    if name:
                        written.append(pathmod.normalize(name, st.cwd, st.home, shell=True))
            for p in written:
                st.downloads[p] = program
        if program in effectmod.DECODERS:  # `base64 -d p.b64 > /tmp/p.sh`: decoded code, maybe run later
            for p in outs:
                st.downloads[p] = program
        if program == "tee" and cmd.stdin_from:
            feeders = [p for p in cmd.stdin_from if p in DOWNLOADERS]
            for operand in fact["operands"]:
                p = pathmod.normalize(operand, st.cwd, st.home, shell=True)
                if feeders:
                    st.downloads[p] = feeders[0]
        if program in COPIERS and len(fact["operands"]) >= 2 and fact["writes"]:
            dst = fact["writes"][-1]
            for s in fact["paths_raw"]:
                st.aliases.setdefault(dst, []).append(s)
                st.aliases.setdefault(dst.rstrip("/") + "/" + posixpath.basename(s), []).append(s)
                if s in st.downloads:
                    st.downloads[dst] = st.downloads[s]
        for p in outs:
            st.aliases.setdefault(p, []).extend(fact["paths_raw"])
        text = fed_text(cmd) if outs or program == "tee" else None
        appends = {r["path"] for r in cmd.redirects if r.get("path") and r["op"] == ">>"}
        targets = outs + (
            [pathmod.normalize(o, st.cwd, st.home, shell=True) for o in fact["operands"]] if program == "tee" else []
        )
        for p in targets:  # static text written to a file that may be run later in the line
            if text is None:
                st.scripts.pop(p, None)
                if program not in DOWNLOADERS:  # `base64 -d > f; sh f`: what f holds came from it
                    st.downloads[p] = program
            else:
                st.scripts[p] = (st.scripts.get(p, "") if p in appends else "") + text
        if program == "chmod":
            pass

    # ---- words ----------------------------------------------------------------------------
