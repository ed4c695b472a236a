"""A deterministic synthetic chat corpus for the store benchmark.

Sessions are lists of turns; a turn is a user message, an assistant message and, in about half the turns, a
tool message, each a ``(role, content)`` pair. Message lengths are lognormal per role (medians: user 80,
assistant 350, tool 500 characters; capped at 4,000). Exactly a quarter of the messages (``n // 4``) are
Chinese: whole sessions are chosen in a seeded order until the quota is met, the last one partly. English text
comes from a Zipf-weighted vocabulary of common English words, technical terms and generated pseudo-words;
Chinese text from a Zipf-weighted list of 8,000 words (common one-character particles first, then made-up words
of one to four characters, mostly two) whose characters are drawn Zipf-weighted from a set of 3,000 CJK Unified
Ideographs (the most common characters first, filled up from U+4E00), with Chinese punctuation and occasional
embedded ASCII words such as ``Python``. Words make character trigrams recur as in real text; characters drawn
one by one would make almost every trigram unique. A Chinese message has 0.4 times the characters an English one
would, so its UTF-8 size is similar.

Everything is seeded: the same ``(n_messages, seed)`` always gives the same corpus (``random.Random`` only,
no global state).
"""

from __future__ import annotations

import itertools
import math
import random
import re
from collections.abc import Iterator, Sequence
from typing import Final

__all__ = [
    "DEFAULT_SEED",
    "Message",
    "Session",
    "Turn",
    "arrival_order",
    "batches",
    "content_bytes",
    "count_cjk_messages",
    "generate_messages",
    "generate_sessions",
    "is_chinese",
    "iter_messages",
    "sample_queries",
]

DEFAULT_SEED: Final = 20261130

Message = tuple[str, str]  # (role, content)
Turn = list[Message]
Session = list[Turn]

# (median characters, lognormal sigma) per role.
_LENGTHS: Final = {"user": (80.0, 0.9), "assistant": (350.0, 0.8), "tool": (500.0, 1.0)}
_MAX_CHARS: Final = 4000
_TOOL_TURN_PROBABILITY: Final = 0.5
_TURNS_MEDIAN: Final = 5.0
_TURNS_SIGMA: Final = 1.0
_MAX_TURNS: Final = 200
_CHINESE_SHARE_DIVISOR: Final = 4
_CHINESE_LENGTH_FACTOR: Final = 0.4
_VOCABULARY_SIZE: Final = 4000
_CJK_SET_SIZE: Final = 3000
_TABLE_SIZE: Final = 1 << 18


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


# Function words, roughly in English frequency order; they take the top Zipf ranks.
_FUNCTION_WORDS: Final = _words(
    "the of and to a in is that it for you was on are with as i be this have not at or by from but they "
    "we an can if will your all would there their what so which do one about more when up out my has its "
    "been no them some could then than into other only also just how these our should like may any each "
    "because those very most such here where after before over both while through between without again "
    "does did had were me us he she his her him who why now well still even much many few every must"
)

_COMMON_WORDS: Final = _words(
    "time people way year day thing man world life hand part child eye woman place work week case point "
    "number group problem fact question answer idea result change reason example line end side kind head "
    "house service friend power hour game night area money story issue term level order team minute word "
    "business family system program data file code error test server user message model session search "
    "database table index query function value string list object class method module package version "
    "install update build deploy release branch commit merge review config setting option command script "
    "output input response request token prompt context memory cache queue worker thread process task job "
    "schedule timer network socket port host address domain route proxy client browser page link image text "
    "document report summary note draft email calendar meeting project plan budget price cost order invoice "
    "customer account login password permission role access key secret certificate log trace metric alert "
    "monitor dashboard backup restore migrate schema column row record field type format parse encode decode "
    "translate explain describe compare suggest recommend check verify confirm fix debug run start stop "
    "restart open close read write send receive create delete remove add use make get give take find show "
    "try need want know think look help tell ask call move keep let begin seem talk turn put mean become "
    "leave bring happen provide sit stand lose pay meet include continue learn lead understand watch follow "
    "good new first last long great little own old right big high different small large next early young "
    "important public bad same able simple clear sure easy hard quick slow fast recent current previous "
    "possible likely main local remote default empty full safe stable latest final real whole common"
)

_TECH_WORDS: Final = _words(
    "python docker kubernetes sqlite postgres redis nginx linux ubuntu github gitlab json yaml toml csv html "
    "css javascript typescript rust golang java http https api rest graphql websocket telegram slack discord "
    "whatsapp signal matrix openai anthropic llm gpt embedding vector gateway daemon systemd cron webhook "
    "oauth jwt ssh tls dns cdn aws gcp azure s3 lambda terraform ansible pytest mypy ruff pip venv npm yarn "
    "node react vue django flask fastapi asyncio pandas numpy regex unicode utf8 markdown latex pdf"
)

_ASCII_IN_CHINESE: Final = (
    "Python",
    "API",
    "Docker",
    "SQLite",
    "JSON",
    "GitHub",
    "Linux",
    "bug",
    "token",
    "prompt",
    "GPU",
    "URL",
    "HTTP",
    "Telegram",
    "Slack",
    "AI",
    "LLM",
    "OK",
    "Git",
    "Redis",
)

# The most common Chinese characters, roughly by frequency; the set is filled up to 3,000 from U+4E00 upward.
_COMMON_CJK: Final = (
    "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么"
    "心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现"
    "分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位"
    "因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师"
    "书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及"
    "今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结"
    "六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区"
    "即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友"
    "孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坐集编宝谈府"
    "拉黑且随格尽剑讲布杀微怕母调局根曾准团段终乐切级克精哪官示冷域哥病急该类统存错费试验调查服务器数据库用户"
)
_CJK_FIRST: Final = 0x4E00
# Single-character function words; they take the top ranks of the Chinese word list.
_CJK_PARTICLES: Final = "的了是在我有和就不人都一这也你他要会说到着那吗呢吧个们很"
_CJK_WORDS: Final = 8000
_CJK_END_CLAUSE: Final = ("，", "，", "，", "、", "：", "；")
_CJK_END_SENTENCE: Final = ("。", "。", "。", "。", "？", "！")
_EN_END_SENTENCE: Final = (".", ".", ".", ".", ".", "?", "!", ":")

_TOKEN_RE: Final = re.compile(r"[a-z0-9]+")  # what unicode61 makes of the ASCII text
_CJK_RUN_RE: Final = re.compile(r"[\u4e00-\u9fff]+")
_CJK_RE: Final = re.compile(r"[\u4e00-\u9fff]")


def _zipf_table(symbols: Sequence[str], *, exponent: float, offset: float) -> list[str]:
    """A list in which each symbol fills a share of slots proportional to ``1 / (rank + offset) ** exponent``.

    Drawing uniformly from it (``rng.choices(table, k=n)``) is a Zipf-Mandelbrot draw, about twice as fast as
    ``choices`` with cumulative weights; every symbol keeps at least one slot.
    """
    weights = [1.0 / (rank + offset) ** exponent for rank in range(1, len(symbols) + 1)]
    scale = _TABLE_SIZE / sum(weights)
    table: list[str] = []
    for symbol, weight in zip(symbols, weights, strict=True):
        table.extend(itertools.repeat(symbol, max(1, round(weight * scale))))
    return table


def _pseudo_words(rng: random.Random, count: int, taken: set[str]) -> list[str]:
    """Pronounceable, distinct, made-up words of one to three syllables."""
    onsets = _words("b c d f g h j k l m n p r s t v w z br cl dr fl gr pl pr sh st th tr ch")
    vowels = _words("a e i o u a e i o ea ou ai io")
    codas = ["", "", "", "n", "r", "s", "t", "l", "m", "nd", "st", "ng", "ck", "x"]
    words: list[str] = []
    while len(words) < count:
        syllables = rng.choices((1, 2, 3), weights=(3, 5, 2))[0]
        word = "".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas) for _ in range(syllables))
        if 3 <= len(word) <= 14 and word not in taken:
            taken.add(word)
            words.append(word)
    return words


class _Vocabulary:
    """The English and Chinese symbol sets with their Zipf weights, built once per seed."""

    def __init__(self, rng: random.Random) -> None:
        function_words = list(dict.fromkeys(_FUNCTION_WORDS))
        taken = set(function_words)
        content = [w for w in dict.fromkeys([*_COMMON_WORDS, *_TECH_WORDS]) if w not in taken]
        taken.update(content)
        content += _pseudo_words(rng, _VOCABULARY_SIZE - len(function_words) - len(content), taken)
        # The real words keep a head start: shuffle them among the first made-up words only.
        head = content[: 2 * len(_COMMON_WORDS)]
        rng.shuffle(head)
        self.words: list[str] = function_words + head + content[len(head) :]
        self.word_table = _zipf_table(self.words, exponent=1.05, offset=1.7)
        self.stopwords = frozenset(self.words[:60])
        # Mean characters per drawn word, with the separating space.
        self.chars_per_word = sum(map(len, self.word_table)) / len(self.word_table) + 1.0

        common = list(dict.fromkeys(_COMMON_CJK))
        known = set(common)
        filler = (chr(c) for c in itertools.count(_CJK_FIRST) if chr(c) not in known)
        self.cjk: list[str] = common + list(itertools.islice(filler, _CJK_SET_SIZE - len(common)))
        self.cjk_table = _zipf_table(self.cjk, exponent=1.0, offset=2.0)
        self.cjk_stop = frozenset(self.cjk[:30])
        # Chinese words: the particles, then made-up words of one to four Zipf-drawn characters, mostly two.
        cjk_words = dict.fromkeys(_CJK_PARTICLES)
        while len(cjk_words) < _CJK_WORDS:
            size = rng.choices((1, 2, 3, 4), weights=(15, 60, 15, 10))[0]
            cjk_words.setdefault("".join(rng.choices(self.cjk_table, k=size)), None)
        self.cjk_word_table = _zipf_table(list(cjk_words), exponent=1.0, offset=2.7)
        self.cjk_chars_per_word = sum(map(len, self.cjk_word_table)) / len(self.cjk_word_table)


def _length(rng: random.Random, role: str) -> int:
    median, sigma = _LENGTHS[role]
    return max(2, min(_MAX_CHARS, int(rng.lognormvariate(math.log(median), sigma))))


def _english(rng: random.Random, vocab: _Vocabulary, role: str, chars: int) -> str:
    n = max(1, round(chars / vocab.chars_per_word))
    words = rng.choices(vocab.word_table, k=n)
    rnd = rng.random
    if role == "tool":
        # Tool output: lines of words with key=value pairs, paths and JSON-ish numbers among them.
        for i in range(0, n, 6):
            pick = int(rnd() * 5)
            if pick == 0:
                words[i] = f"{words[i]}={int(rnd() * 100000)}"
            elif pick == 1:
                words[i] = f"/srv/{words[i]}/{words[min(i + 1, n - 1)]}.py:{1 + int(rnd() * 900)}"
            elif pick == 2:
                words[i] = f'"{words[i]}": {int(rnd() * 1000)},'
        text = "\n".join(" ".join(words[start : start + 9]) for start in range(0, n, 9))
        return text[:chars]  # the longer tokens above would otherwise stretch the length distribution
    sentences: list[str] = []
    start = 0
    while start < n:
        size = 4 + int(rnd() * 14)
        chunk = words[start : start + size]
        if len(chunk) > 7:
            chunk[2 + int(rnd() * (len(chunk) - 4))] += ","
        if role == "assistant" and len(chunk) > 3 and rnd() < 0.08:
            chunk[1 + int(rnd() * (len(chunk) - 2))] += " —"  # LLM prose has em dashes
        sentence = " ".join(chunk)
        sentences.append(sentence[0].upper() + sentence[1:] + _EN_END_SENTENCE[int(rnd() * 8)])
        start += size
    if role == "assistant" and len(sentences) > 4 and rnd() < 0.33:
        # A markdown list in about a third of the longer answers.
        cut = len(sentences) // 2
        text = " ".join(sentences[:cut]) + "\n\n" + "\n".join(f"- {s}" for s in sentences[cut:])
    else:
        text = " ".join(sentences)
    return text[:_MAX_CHARS]


def _chinese(rng: random.Random, vocab: _Vocabulary, role: str, chars: int) -> str:
    n = max(1, round(chars * _CHINESE_LENGTH_FACTOR / vocab.cjk_chars_per_word))
    words = rng.choices(vocab.cjk_word_table, k=n)
    rnd = rng.random
    clauses: list[str] = []
    start = 0
    while start < n:
        size = 2 + int(rnd() * 6)
        clause = "".join(words[start : start + size])
        start += size
        roll = rnd()
        if roll < 0.14:
            word = _ASCII_IN_CHINESE[int(rnd() * len(_ASCII_IN_CHINESE))]
            at = int(rnd() * (len(clause) + 1))
            glue = " " if rnd() < 0.5 else ""
            clause = f"{clause[:at]}{glue}{word}{glue}{clause[at:]}"
        elif roll < 0.2:
            clause += str(2 + int(rnd() * 2000))
        if start >= n or rnd() < 0.33:
            clauses.append(clause + _CJK_END_SENTENCE[int(rnd() * 6)])
            if role == "tool" and start < n:
                clauses.append("\n")
        else:
            clauses.append(clause + _CJK_END_CLAUSE[int(rnd() * 6)])
    return "".join(clauses)[:_MAX_CHARS]


def _structure(rng: random.Random, n_messages: int) -> list[list[list[str]]]:
    """Sessions of turns of roles, exactly ``n_messages`` roles in all."""
    sessions: list[list[list[str]]] = []
    total = 0
    while total < n_messages:
        turns: list[list[str]] = []
        count = max(1, min(_MAX_TURNS, int(rng.lognormvariate(math.log(_TURNS_MEDIAN), _TURNS_SIGMA))))
        for _ in range(count):
            roles = ["user", "assistant", "tool"] if rng.random() < _TOOL_TURN_PROBABILITY else ["user", "assistant"]
            roles = roles[: n_messages - total]
            if not roles:
                break
            turns.append(roles)
            total += len(roles)
        sessions.append(turns)
    return sessions


def generate_sessions(n_messages: int, *, seed: int = DEFAULT_SEED) -> list[Session]:
    """Return sessions holding exactly ``n_messages`` messages, ``n_messages // 4`` of them in Chinese."""
    if n_messages < 0:
        raise ValueError(f"n_messages must be >= 0, not {n_messages}")
    rng = random.Random(seed)
    vocab = _Vocabulary(random.Random(seed ^ 0x5EED))
    shapes = _structure(rng, n_messages)

    # Chinese sessions: whole sessions in a seeded order until n // 4 messages; the last one partly.
    chinese_left = n_messages // _CHINESE_SHARE_DIVISOR
    quota = [0] * len(shapes)
    order = list(range(len(shapes)))
    rng.shuffle(order)
    for index in order:
        if chinese_left == 0:
            break
        size = sum(len(turn) for turn in shapes[index])
        quota[index] = min(size, chinese_left)
        chinese_left -= quota[index]

    sessions: list[Session] = []
    for index, shape in enumerate(shapes):
        left = quota[index]
        session: Session = []
        for roles in shape:
            turn: Turn = []
            for role in roles:
                chars = _length(rng, role)
                if left > 0:
                    left -= 1
                    turn.append((role, _chinese(rng, vocab, role, chars)))
                else:
                    turn.append((role, _english(rng, vocab, role, chars)))
            session.append(turn)
        sessions.append(session)
    return sessions


def generate_messages(n_messages: int, *, seed: int = DEFAULT_SEED) -> list[Message]:
    """Return exactly ``n_messages`` messages: the sessions of :func:`generate_sessions`, flattened."""
    return list(iter_messages(generate_sessions(n_messages, seed=seed)))


def iter_messages(sessions: Sequence[Session]) -> Iterator[Message]:
    """Yield every message, session by session, turn by turn."""
    for session in sessions:
        for turn in session:
            yield from turn


def content_bytes(sessions: Sequence[Session]) -> int:
    """Total UTF-8 bytes of message content."""
    return sum(len(content.encode("utf-8")) for _, content in iter_messages(sessions))


def is_chinese(content: str) -> bool:
    """Whether a message holds CJK ideographs (the corpus's Chinese messages do, its English ones never)."""
    return _CJK_RE.search(content) is not None


def count_cjk_messages(sessions: Sequence[Session]) -> int:
    """How many messages are Chinese."""
    return sum(1 for _, content in iter_messages(sessions) if is_chinese(content))


def batches(sessions: Sequence[Session], turn_size: int) -> list[list[list[Message]]]:
    """Per session, its messages in append batches: natural turns when ``turn_size`` is 0, else fixed chunks.

    Returns one list of batches per session.
    """
    if turn_size < 0:
        raise ValueError(f"turn_size must be >= 0, not {turn_size}")
    out: list[list[list[Message]]] = []
    for session in sessions:
        if turn_size == 0:
            out.append([list(turn) for turn in session])
        else:
            flat = [m for turn in session for m in turn]
            out.append([flat[i : i + turn_size] for i in range(0, len(flat), turn_size)])
    return out


def arrival_order(
    per_session: Sequence[Sequence[object]], *, concurrent: int = 64, seed: int = DEFAULT_SEED
) -> list[tuple[int, int]]:
    """Interleave sessions as a gateway sees them: ``(session index, item index)`` in arrival order.

    ``concurrent`` sessions are active at once; each step picks one of them at random and takes its next
    item; a finished session is replaced by the next one not yet started.
    """
    rng = random.Random(seed ^ 0xA1)
    pending = iter(range(len(per_session)))
    active: list[list[int]] = []  # [session index, next item]
    for index in itertools.islice(pending, concurrent):
        if per_session[index]:
            active.append([index, 0])
    out: list[tuple[int, int]] = []
    while active:
        slot = rng.randrange(len(active))
        index, item = active[slot]
        out.append((index, item))
        if item + 1 < len(per_session[index]):
            active[slot][1] = item + 1
            continue
        replacement = next((i for i in pending if per_session[i]), None)
        if replacement is None:
            active[slot] = active[-1]
            active.pop()
        else:
            active[slot] = [replacement, 0]
    return out


def sample_queries(sessions: Sequence[Session], count: int, *, seed: int = DEFAULT_SEED) -> list[tuple[str, str]]:
    """Return ``count`` ``(kind, query)`` pairs drawn from the corpus, the kinds in turn.

    Kinds: ``en_word`` (one word), ``en_and`` (two words of one message), ``en_phrase`` (two adjacent words,
    quoted), ``en_prefix`` (three letters and ``*``), ``zh_1``, ``zh_2`` and ``zh_4`` (Chinese runs of one,
    two and four characters). Words and characters come from a random message of the right language; the
    sixty most frequent English words and thirty most frequent characters are not used alone.
    """
    rng = random.Random(seed ^ 0x0E)
    vocab = _Vocabulary(random.Random(seed ^ 0x5EED))
    english: list[str] = []
    chinese: list[str] = []
    for _, content in iter_messages(sessions):
        (chinese if is_chinese(content) else english).append(content)
    kinds = ["en_word", "en_and", "en_phrase", "en_prefix", "zh_1", "zh_2", "zh_4"]
    if not chinese:
        kinds = kinds[:4]
    if not english:
        kinds = kinds[4:]
    out: list[tuple[str, str]] = []
    attempts = 0
    while len(out) < count and kinds and attempts < 100 * count + 100:
        attempts += 1
        kind = kinds[len(out) % len(kinds)]
        query = _query(rng, vocab, kind, rng.choice(chinese if kind.startswith("zh") else english))
        if query is not None:
            out.append((kind, query))
    return out


def _query(rng: random.Random, vocab: _Vocabulary, kind: str, content: str) -> str | None:
    if kind.startswith("zh"):
        size = int(kind[3:])
        runs: list[str] = [r for r in _CJK_RUN_RE.findall(content) if len(r) >= size]
        if not runs:
            return None
        run = rng.choice(runs)
        at = rng.randrange(len(run) - size + 1)
        piece = run[at : at + size]
        return None if size == 1 and piece in vocab.cjk_stop else piece
    tokens: list[str] = _TOKEN_RE.findall(content.lower())
    content_words = [t for t in tokens if t.isalpha() and t not in vocab.stopwords]
    if not content_words:
        return None
    if kind == "en_word":
        return rng.choice(sorted(set(content_words)))
    if kind == "en_and":
        distinct = sorted(set(content_words))
        return " ".join(rng.sample(distinct, 2)) if len(distinct) >= 2 else None
    if kind == "en_phrase":
        pairs = [(a, b) for a, b in itertools.pairwise(tokens) if a not in vocab.stopwords or b not in vocab.stopwords]
        if not pairs:
            return None
        first, second = rng.choice(pairs)
        return f'"{first} {second}"'
    long_words = [w for w in content_words if len(w) >= 5]
    return rng.choice(long_words)[:3] + "*" if long_words else None
