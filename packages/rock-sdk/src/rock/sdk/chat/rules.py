"""The built-in interpreter: a prompt in English or Chinese to one action, by fixed rules.

Offline and deterministic: the same prompt always gives the same :class:`Interpretation`, and
:func:`interpret` does no I/O (it never looks at the sandbox). It understands one instruction
per prompt; anything it does not recognise is ``kind="unknown"`` (the chat then lists what it
can do, and runs nothing).

How a prompt is read, in this order (the first rule that matches wins):

1. help ("help", "what can you do", "帮助", "你能做什么");
2. run a command ("run `ls -l`", "execute: python3 -V", "运行 echo hi", "执行命令 `df -h`");
3. install packages ("install numpy", "pip install requests==2.32.3", "apt install curl",
   "安装 numpy", "帮我装一下 numpy", "用 apt 安装 jq"): apt when the prompt says apt,
   apt-get, system or "系统", Python's pip otherwise;
4. GEM envs, when the prompt speaks of an env, a game or an episode, or starts with "step" or
   "move" ("start a Sokoban environment", "reset the env with seed 3", "step up",
   "创建一个推箱子环境", "环境走一步 left", "关闭环境");
5. stop the sandbox ("stop the sandbox", "shut it down", "停止沙箱");
6. delete a path ("delete /tmp/x", "删除 /tmp/x");
7. write a file ('write "hi" to /tmp/a.txt', "把 hello 写入 /tmp/a.txt");
8. list a directory ("list files in /tmp", "ls /etc", "列出 /tmp 的文件");
9. logs ("show the logs", "show the log /var/log/dpkg.log", "tail /var/log/dpkg.log", "查看日志");
10. read a file ("read /etc/hostname", "cat /etc/os-release", "查看文件 /etc/hostname");
11. resource usage ("show resource usage", "how much memory is used", "资源使用情况");
12. status ("status", "is it running", "沙箱状态").

Keywords are looked for in the prompt with its paths and quoted parts taken out, so a path like
``/srv/env`` never reads as an env.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import attrs

from rock.sdk.chat.response import Language

__all__ = ["GAMES", "Interpretation", "detect_language", "interpret"]

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_QUOTED = re.compile(
    r"```(?:\w*\n)?(.+?)```|`([^`]+)`|\"([^\"]*)\"|'([^']*)'|“([^”]*)”|‘([^’]*)’|「([^」]*)」|『([^』]*)』",
    re.S,
)
# An absolute (or ~/, ./) path; Chinese punctuation and quotes end it.
_PATH = re.compile(r"(?<![\w/.~])((?:~|\.{1,2})?/[^\s'\"`“”‘’「」，。；：！？、（）,;!?()]*)")
_SEED = re.compile(r"(?:seed|种子|随机种子)\s*(?:=|:|：|为|是|of)?\s*(-?\d+)", re.I)
# An env's handle: its sandbox's id, ".e", a number (what make_env answers).
_ENV_HANDLE = re.compile(r"(?<![\w./-])([A-Za-z0-9][A-Za-z0-9_-]*\.e\d+)\b")
_ENV_ID = re.compile(
    r"\b([a-z]+:[A-Za-z0-9]+(?:-v\d+)(?:-[A-Za-z0-9-]+)?|[a-z]+:[A-Za-z0-9_.-]+)\b"
)
# The first word of a command given bare: a program's name or path (not an article, not Chinese).
_PROGRAM = re.compile(
    r"^(?!(?:a|an|the|some|my|this|that)\b)[A-Za-z0-9_./~+$-][^\s]*(?:\s|$)", re.I
)
_BOXED = re.compile(r"\\boxed\{[^{}]*\}")

#: Game names a prompt may use for GEM's ids (``sokoban`` -> ``game:Sokoban-v0-<difficulty>``).
GAMES: dict[str, str] = {
    "sokoban": "Sokoban",
    "推箱子": "Sokoban",
    "minesweeper": "Minesweeper",
    "扫雷": "Minesweeper",
    "sudoku": "Sudoku",
    "数独": "Sudoku",
    "mastermind": "Mastermind",
    "猜颜色": "Mastermind",
    "2048": "Game2048",
    "game2048": "Game2048",
    "guess the number": "GuessTheNumber",
    "guessthenumber": "GuessTheNumber",
    "猜数字": "GuessTheNumber",
    "tower of hanoi": "TowerofHanoi",
    "towerofhanoi": "TowerofHanoi",
    "hanoi": "TowerofHanoi",
    "汉诺塔": "TowerofHanoi",
    "fifteen puzzle": "FifteenPuzzle",
    "15 puzzle": "FifteenPuzzle",
    "fifteenpuzzle": "FifteenPuzzle",
    "数字华容道": "FifteenPuzzle",
}
_DIFFICULTY = {
    "easy": "easy",
    "简单": "easy",
    "hard": "hard",
    "困难": "hard",
    "难": "hard",
    "random": "random",
    "随机": "random",
}
_DIRECTIONS = {"上": "up", "下": "down", "左": "left", "右": "right"}

# English filler around package names; Chinese filler is cut by pattern below.
_PACKAGE_FILLER = {
    "install",
    "please",
    "the",
    "a",
    "an",
    "python",
    "python3",
    "pip",
    "pip3",
    "apt",
    "apt-get",
    "package",
    "packages",
    "library",
    "libraries",
    "module",
    "modules",
    "system",
    "debian",
    "and",
    "also",
    "for",
    "me",
    "in",
    "into",
    "sandbox",
    "this",
    "it",
    "can",
    "you",
    "could",
    "would",
    "with",
    "using",
    "via",
    "use",
    "through",
    "to",
    "on",
    "some",
    "then",
}


@attrs.frozen
class Interpretation:
    """What the rules made of a prompt.

    :param kind: ``"action"`` (``action`` and ``args`` say what to run), ``"help"``, ``"unknown"``
        (not understood), or ``"incomplete"`` (understood, but a needed part is missing: ``missing``
        names it, e.g. ``"path"``).
    :param language: the prompt's language.
    """

    kind: Literal["action", "help", "unknown", "incomplete"]
    language: Language
    action: str | None = None
    args: dict[str, Any] = attrs.field(factory=dict)
    missing: str | None = None


def detect_language(prompt: str) -> Language:
    """``"zh"`` when the prompt holds a Chinese character, else ``"en"``."""
    return "zh" if _CJK.search(prompt or "") else "en"


def _quoted(text: str) -> str | None:
    match = _QUOTED.search(text)
    if match is None:
        return None
    return next(g for g in match.groups() if g is not None)


def _paths(text: str) -> list[str]:
    outside = _QUOTED.sub(" ", text)
    return [p[:-1] if len(p) > 1 and p.endswith(".") else p for p in _PATH.findall(outside)]


def _bare(text: str) -> str:
    """The prompt without quoted parts and paths, lower-cased: where keywords are looked for."""
    return _PATH.sub(" ", _QUOTED.sub(" ", text)).lower()


def _has(pattern: str, text: str) -> bool:
    return re.search(pattern, text, re.I) is not None


def interpret(prompt: str) -> Interpretation:
    """Read ``prompt`` by the rules in this module's docstring."""
    text = " ".join((prompt or "").split())
    lang = detect_language(text)
    bare = _bare(text)

    def act(action: str, **args: Any) -> Interpretation:
        return Interpretation(
            "action", lang, action, {k: v for k, v in args.items() if v is not None}
        )

    def incomplete(missing: str, action: str) -> Interpretation:
        return Interpretation("incomplete", lang, action, missing=missing)

    if not text:
        return Interpretation("unknown", lang)
    if re.fullmatch(
        r"(help|\?|what can you do\??|what do you do\??|commands|帮助|帮助一下|你能做什么[？?]?|你会什么[？?]?|能做什么[？?]?)",
        bare.strip(" ?？!！.。"),
    ):
        return Interpretation("help", lang)

    # 2. Run a command: the verb first, then the command (quoted, or the rest of the prompt).
    run = re.match(
        r"^(?:please\s+|can you\s+|could you\s+)?(?:run|execute|exec)\b(?:\s+(?:the\s+)?(?:shell\s+)?command)?\s*[:：]?\s*(.*)$",
        text,
        re.I,
    ) or re.match(
        r"^(?:请|帮我|麻烦)?(?:运行|执行)(?:一下)?(?:这条|一条|下面的)?(?:shell\s*)?(?:命令|指令)?\s*[:：]?\s*(.*)$",
        text,
    )
    if run:
        # The command is what follows the verb: in backticks, in quotes as a whole, or bare
        # (quotes inside it belong to it).
        rest = run.group(1).strip()
        ticks = re.search(r"```(?:\w*\n)?(.+?)```|`([^`]+)`", rest, re.S)
        whole = re.fullmatch(r"\"(.+)\"|'(.+)'|“(.+)”|「(.+)」", rest)
        quoted = ticks or whole
        command = next(g for g in quoted.groups() if g is not None) if quoted else rest
        command = re.sub(
            r"\s*(?:in the sandbox|in this sandbox|在沙箱里|在沙箱中)[.。]?$", "", command
        ).strip()
        if not command:
            return incomplete("command", "run_command")
        # A bare "command" that does not start like one ("run a Sokoban game", "运行一个游戏")
        # is not run on a guess: the other rules read it.
        if ticks or whole or _PROGRAM.match(command):
            return act("run_command", command=command)

    # 3. Install packages.
    if _has(r"(?<!un)\binstall\b", bare) or re.search(
        r"安装|(?:^|帮我|请|给我|麻烦)装(?:一下|上)?\s*[A-Za-z0-9]", bare
    ):
        apt = _has(r"\bapt(-get)?\b|\bsystem\b|\bdebian\b|\bdpkg\b", bare) or "系统" in bare
        packages = _packages(text, lang)
        action = "install_apt_packages" if apt else "install_python_packages"
        if not packages:
            return incomplete("packages", action)
        return act(action, packages=packages)

    # 4. GEM envs.
    env = _env(text, bare, lang)
    if env is not None:
        return env

    # 5. Stop the sandbox.
    if (
        re.match(r"^(?:please\s+)?(?:stop|shut\s*(?:it\s+)?down|terminate|halt)\b", bare.strip())
        or _has(
            r"\b(stop|shut\s*down|terminate|delete|remove|destroy|kill)\b.*\b(the|this)\s+(sandbox|container)\b",
            bare,
        )
        or re.search(
            r"(停止|关闭|关掉|停掉|销毁|删除)(这个|该|当前)?(沙箱|容器)|^(停止|关机)", bare
        )
    ):
        return act("stop_sandbox")

    paths = _paths(text)
    path = paths[0] if paths else None

    # 6. Delete a path.
    if _has(r"\b(delete|remove|rm|erase)\b", bare) or re.search(r"删除|删掉|移除", bare):
        return act("delete_file", path=path) if path else incomplete("path", "delete_file")

    # 7. Write a file.
    write = _write(text, bare, path)
    if write is not None:
        return write

    # 8. List a directory.
    if _has(
        r"\b(list|ls|dir)\b|\bfiles\b|what'?s in\b|\bdirectory\b|\bfolder\b", bare
    ) or re.search(r"列出|列一下|目录|文件列表|有哪些文件|有什么文件|哪些文件", bare):
        if not (_has(r"\blogs?\b", bare) or "日志" in bare):
            return act("list_files", path=path or "/")

    # 9. Logs.
    if (
        _has(r"\blogs?\b|\bhistory\b", bare)
        or re.search(r"日志|历史", bare)
        or (path and re.match(r"^tail\b", bare.strip()))
    ):
        lines = re.search(r"(?:last|最后)\s*(\d+)\s*(?:lines|行)?", text, re.I)
        return act("show_logs", path=path, lines=int(lines.group(1)) if lines and path else None)

    # 10. Read a file.
    if path and (
        _has(r"\b(read|cat|show|print|open|display|view|contents?|what does)\b", bare)
        or re.search(r"读取|读一下|读|查看|显示|打开|看看|看一下|内容|输出", bare)
    ):
        return act("read_file", path=path)

    # 11. Resource usage.
    if _has(
        r"\b(resources?|usage|cpu|memory|mem|ram|disk|network|stats|statistics|load)\b", bare
    ) or re.search(r"资源|使用率|使用情况|占用|内存|cpu|磁盘|网络|统计|负载", bare):
        return act("show_resource_usage")

    # 12. Status.
    if _has(r"\b(status|state|alive|running|health|healthy|info)\b", bare) or re.search(
        r"状态|运行情况|在运行|还活着|信息|健康", bare
    ):
        return act("show_status")

    return Interpretation("unknown", lang)


def _packages(text: str, lang: str) -> list[str]:
    quoted = _QUOTED.findall(text)
    source = " ".join(next(g for g in q if g is not None) for q in quoted) if quoted else text
    if not quoted:
        after = re.split(r"(?<!un)\binstall\b|安装|装(?:一下|上)?", source, maxsplit=1, flags=re.I)
        source = after[1] if len(after) > 1 else source
    source = re.sub(
        r"(的)?(python\s*)?(系统)?(软件)?(包|库|模块)|用\s*(pip3?|apt(-get)?)|通过|使用|一下|请|帮我|和|以及|还有|并且|然后|到沙箱(里|中)?|在沙箱(里|中)?",
        " ",
        source,
        flags=re.I,
    )
    source = re.sub(r"[，、,；;。!！?？:：]|\.(?=\s|$)", " ", source)
    names = []
    for word in source.split():
        if word.lower() in _PACKAGE_FILLER or _CJK.search(word):
            continue
        names.append(word)
    return names


def _env(text: str, bare: str, lang: str) -> Interpretation | None:
    games = [(name, game) for name, game in GAMES.items() if name in bare]
    env_id_match = _ENV_ID.search(text)
    handle_match = _ENV_HANDLE.search(text)
    spoken = _has(r"\b(env|envs|environment|environments|episode|game|gem)\b", bare) or re.search(
        r"环境|游戏|这一局|对局", bare
    )
    stepping = re.match(r"^(?:please\s+)?(?:step|move|go)\b", bare.strip()) or re.match(
        r"^(?:向)?[上下左右](?:移|走)", bare.strip()
    )
    if not (spoken or games or env_id_match or stepping):
        return None
    lang_: Language = "zh" if lang == "zh" else "en"
    seed = _SEED.search(text)
    seed_value = int(seed.group(1)) if seed else None
    handle = handle_match.group(1) if handle_match else None

    def act(name: str, **args: Any) -> Interpretation:
        return Interpretation(
            "action", lang_, name, {k: v for k, v in args.items() if v is not None}
        )

    if _has(r"\breset\b|\brestart\b|\bnew episode\b|\bstart over\b", bare) or re.search(
        r"重置|重新开始|再来一局|新的一局", bare
    ):
        return act("reset_env", seed=seed_value, env=handle)
    if (
        stepping
        or _has(r"\b(step|move|action|play)\b", bare)
        or re.search(r"走一步|执行动作|动作|移动|走|下一步", bare)
    ):
        action = _step_action(text, bare)
        if action is None:
            return Interpretation("incomplete", lang_, "step_env", missing="action")
        return act("step_env", action=action, env=handle)
    if _has(r"\b(close|stop|end|quit|shut)\b", bare) or re.search(
        r"关闭|停止|结束|关掉|退出", bare
    ):
        return act("close_env", env=handle)
    if (
        _has(r"\b(start|make|create|launch|open|new|run|spin up|begin)\b", bare)
        or re.search(r"创建|启动|开启|新建|开一个|来一个|开始|打开|建一个", bare)
        or games
        or env_id_match
    ):
        env_id = env_id_match.group(1) if env_id_match else None
        if env_id is None and games:
            game = max(games, key=lambda g: len(g[0]))[1]
            difficulty = next((v for k, v in _DIFFICULTY.items() if k in bare), "easy")
            env_id = f"game:{game}-v0-{difficulty}"
        if env_id is None:
            return Interpretation("incomplete", lang_, "make_env", missing="env_id")
        return act("make_env", env_id=env_id, seed=seed_value)
    return None


def _step_action(text: str, bare: str) -> str | None:
    boxed = _BOXED.search(text)
    if boxed:
        return boxed.group(0)
    quoted = _quoted(text)
    if quoted:
        return quoted if quoted.startswith("\\boxed") else f"\\boxed{{{quoted}}}"
    for word in ("up", "down", "left", "right"):
        if re.search(rf"\b{word}\b", bare):
            return f"\\boxed{{{word}}}"
    for zh, word in _DIRECTIONS.items():
        if re.search(rf"(向|往|朝){zh}|{zh}(移|走)|动作\s*{zh}", bare):
            return f"\\boxed{{{word}}}"
    rest = re.search(
        r"(?:step|move|action|play|动作|走一步|执行)\s*[:：]?\s*(?:with\s+)?([A-Za-z0-9 ]+?)\s*$",
        text,
        re.I,
    )
    filler = {
        "the",
        "a",
        "an",
        "env",
        "envs",
        "environment",
        "game",
        "in",
        "once",
        "one",
        "it",
        "this",
        "again",
        "please",
    }
    words = [w for w in (rest.group(1).split() if rest else []) if w.lower() not in filler]
    return f"\\boxed{{{' '.join(words)}}}" if words else None


def _write(text: str, bare: str, path: str | None) -> Interpretation | None:
    lang = detect_language(text)
    en = _has(r"\b(write|save|put|create)\b", bare)
    zh = re.search(r"写入|写到|写进|保存到|保存|创建文件|新建文件|写", bare)
    if not (en or zh):
        return None
    if path is None:
        return Interpretation("incomplete", lang, "write_file", missing="path")
    content = _quoted(text)
    if content is None:
        patterns = (
            r"(?:write|save|put)\s+(.+?)\s+(?:to|into|in)\s+(?:the\s+)?(?:file\s+)?"
            + re.escape(path),
            r"(?:with\s+(?:the\s+)?(?:content|text)|containing|content)\s*[:：]?\s*(.+)$",
            r"把\s*(.+?)\s*(?:写入|写到|写进|保存到)",
            r"(?:内容|文本)\s*(?:为|是)?\s*[:：]?\s*(.+)$",
            r"(?:写入|写)\s*(.+?)\s*(?:到|进)\s*(?:文件\s*)?" + re.escape(path),
        )
        for pattern in patterns:
            match = re.search(pattern, text, re.I)
            if match and match.group(1).strip():
                content = match.group(1).strip()
                break
    if content is None:
        return Interpretation("incomplete", lang, "write_file", missing="content")
    return Interpretation("action", lang, "write_file", {"path": path, "content": content})
