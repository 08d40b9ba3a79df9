#!/usr/bin/env python3
"""gen_api.py - the API reference from include/coll.h's comments.

    python3 docs/gen_api.py markdown include/coll.h > docs/api.md
    python3 docs/gen_api.py man include/coll.h VERSION > coll.3

The header is the specification, so the reference is only a view of it: this script
reorders nothing and adds nothing but headings. It reads the header as paragraphs
separated by blank lines. A paragraph opening with a '/* ---' banner starts a section
(its first line is the title, the rest the section's introduction); a paragraph that is
only a comment is prose; a paragraph with code is an entry, documented by the comment that
opens it. The include guard, extern "C" and the COLL_API definition are plumbing and left
out. The build writes coll(3) with it, and a test checks that docs/api.md is current.
"""
import re
import sys

PLUMBING = re.compile(
    r'^\s*(#\s*ifndef COLL_H|#\s*define COLL_H|#\s*include\b.*|#\s*ifdef __cplusplus|'
    r'extern "C" \{|\}|#\s*endif.*)\s*$')


def paragraphs(lines):
    para = []
    in_comment = False
    for line in lines:
        # A blank line inside a comment does not end the paragraph.
        if not line.strip() and not in_comment:
            if para:
                yield para
            para = []
            continue
        para.append(line)
        s = line
        while True:
            if in_comment:
                end = s.find('*/')
                if end < 0:
                    break
                in_comment = False
                s = s[end + 2:]
            else:
                start = s.find('/*')
                if start < 0:
                    break
                in_comment = True
                s = s[start + 2:]
    if para:
        yield para


def split_leading_comment(para):
    """(comment text lines, remaining code lines) of a paragraph."""
    if not para[0].lstrip().startswith('/*'):
        return [], para
    text = []
    for i, line in enumerate(para):
        s = line.strip()
        closing = s.endswith('*/')
        if i == 0:
            s = s[2:]
        if closing:
            s = s[:-2]
        s = s.strip()
        if s.startswith('*'):
            s = s[1:]
            if s.startswith(' '):
                s = s[1:]
        text.append(s.rstrip())
        if closing:
            return strip_blank(text), para[i + 1:]
    return strip_blank(text), []


def strip_blank(text):
    while text and not text[0].strip():
        text.pop(0)
    while text and not text[-1].strip():
        text.pop()
    return text


def unapi(code):
    """Declarations without the COLL_API marker, continuation lines realigned."""
    out = []
    shift = 0
    for line in code:
        if line.startswith('COLL_API '):
            line = line[len('COLL_API '):]
            shift = len('COLL_API ')
        elif shift and line.startswith(' ' * shift) and not line.lstrip().startswith('/*'):
            line = line[shift:]
        else:
            shift = 0
        out.append(line)
    return out


def names(code):
    text = '\n'.join(code)
    funcs = re.findall(r'\b(coll_[a-z0-9_]+)\s*\(', text)
    if funcs:
        return list(dict.fromkeys(funcs))
    types = re.findall(r'\}\s*(coll_[a-z0-9_]+_t)\s*;', text)
    types += re.findall(r'typedef\s+struct\s+\w+\s+(coll_[a-z0-9_]+_t)\s*;', text)
    if types:
        return list(dict.fromkeys(types))
    return list(dict.fromkeys(re.findall(r'#\s*define\s+(COLL_[A-Z0-9_]+)', text)))


def banner_title(text):
    """A banner's title is its first phrase, up to '. ' or ': '; the rest is prose."""
    first = []
    while text and text[0].strip():
        first.append(text.pop(0).strip())
    joined = ' '.join(first)
    m = re.search(r'[.:](\s|$)', joined)
    if not m:
        return joined, text
    rest = joined[m.end():].strip()
    title = joined[:m.start()].strip()
    if rest:
        rest = rest[0].upper() + rest[1:]
    return title, ([rest] if rest else []) + text


def parse(path):
    with open(path) as f:
        lines = f.read().split('\n')
    intro = []
    sections = []          # [title, [prose], [items]]; an item: ('prose', text) or ('entry', ...)
    current = None
    skipping_if = 0
    for para in paragraphs(lines):
        comment, code = split_leading_comment(para)
        if para[0].lstrip().startswith('/* ---'):
            title, prose = banner_title(comment[1:])
            current = [title, prose, []]
            sections.append(current)
            if not code:
                continue
            comment = []
        if not code:
            if current is None and not intro:
                intro = comment
            elif current is not None:
                current[2].append(('prose', comment))
            continue
        kept = []
        for line in code:
            s = line.strip()
            if skipping_if:
                if re.match(r'#\s*if', s):
                    skipping_if += 1
                elif re.match(r'#\s*endif', s):
                    skipping_if -= 1
                continue
            if re.match(r'#\s*if\s+defined\(_WIN32\)', s):
                skipping_if = 1
                continue
            if PLUMBING.match(line):
                continue
            kept.append(line)
        if not kept:
            if comment and current is None and not intro:
                intro = comment
            elif comment and current is not None:
                current[2].append(('prose', comment))
            continue
        if current is None:
            current = ['Version', [], []]
            sections.append(current)
        nm = names(kept)
        if comment and nm and comment[0].startswith(nm[0] + ' - '):
            comment = [comment[0][len(nm[0]) + 3:]] + comment[1:]
            comment[0] = comment[0][:1].upper() + comment[0][1:]
        current[2].append(('entry', nm, comment, unapi(kept)))
    return intro, sections


def first_line(path):
    with open(path) as f:
        return f.readline()


def md_text(text):
    """Comment text as markdown paragraphs (blank comment lines separate them)."""
    out, para = [], []
    for line in text + ['']:
        if line.strip():
            para.append(line.strip())
        elif para:
            out.append(' '.join(para))
            para = []
    return '\n\n'.join(out)


def markdown(path):
    intro, sections = parse(path)
    out = ['<!-- generated by docs/gen_api.py from include/coll.h: do not edit; -->',
           '<!-- regenerate with: ninja -C BUILD update-docs -->', '',
           '# coll API reference', '',
           'Generated from the comments of `include/coll.h`, which is the specification. '
           'Include `<coll.h>`\nand link with `-lcoll` '
           '(`pkg-config --cflags --libs coll`); see [guide.md](guide.md) for a first\n'
           'program and [env.md](env.md) for the `COLL_*` environment variables.', '']
    if intro:
        out += ['## Overview', '', md_text(intro[1:] if ' - ' in intro[0] else intro), '']
    out += ['## Contents', '']
    for title, _, items in sections:
        anchor = re.sub(r'[^a-z0-9 -]', '', title.lower()).replace(' ', '-')
        calls = [n for it in items if it[0] == 'entry' for n in it[1]]
        out.append('- [%s](#%s)%s' % (title, anchor,
                                      ': ' + ', '.join('`%s`' % n for n in calls)
                                      if calls else ''))
    out.append('')
    for title, prose, items in sections:
        out += ['## ' + title, '']
        if prose:
            out += [md_text(prose), '']
        for it in items:
            if it[0] == 'prose':
                out += [md_text(it[1]), '']
                continue
            _, nm, comment, code = it
            if nm:
                out += ['### ' + ', '.join('`%s`' % n for n in nm), '']
            out += ['```c'] + code + ['```', '']
            if comment:
                out += [md_text(comment), '']
    sys.stdout.write('\n'.join(out).rstrip('\n') + '\n')


def roff_text(s):
    s = s.replace('\\', '\\e').replace('-', '\\-')
    if s.startswith('.') or s.startswith("'"):
        s = '\\&' + s
    return s


def roff_para(text):
    out, para = [], []
    for line in text + ['']:
        if line.strip():
            para.append(roff_text(line.strip()))
        elif para:
            if out:
                out.append('.PP')
            out += para
            para = []
    return out


def man(path, version):
    intro, sections = parse(path)
    out = ['.\\" generated by docs/gen_api.py from include/coll.h: do not edit',
           '.TH COLL 3 "" "coll %s" "coll manual"' % roff_text(version),
           '.SH NAME',
           'coll \\- collective communication library (native API)',
           '.SH SYNOPSIS',
           '.nf',
           '.B #include <coll.h>',
           '.PP',
           'cc prog.c $(pkg\\-config \\-\\-cflags \\-\\-libs coll)',
           '.fi',
           '.SH DESCRIPTION']
    out += roff_para(intro[1:] if intro and ' - ' in intro[0] else intro)
    for title, prose, items in sections:
        out.append('.SH ' + roff_text(title.upper()))
        out += roff_para(prose)
        for it in items:
            if it[0] == 'prose':
                out.append('.PP')
                out += roff_para(it[1])
                continue
            _, nm, comment, code = it
            if nm:
                out.append('.SS ' + roff_text(', '.join(nm)))
            else:
                out.append('.PP')
            out.append('.nf')
            out += ['\\&' + roff_text(line) if line else '' for line in code]
            out.append('.fi')
            if comment:
                out.append('.PP')
                out += roff_para(comment)
    out += ['.SH ENVIRONMENT',
            'See',
            '.BR coll (7)',
            'for the COLL_* variables.',
            '.SH SEE ALSO',
            '.BR coll (7),',
            '.BR collrun (1),',
            '.BR collbench (1)']
    sys.stdout.write('\n'.join(out) + '\n')


def main(argv):
    if len(argv) == 3 and argv[1] == 'markdown':
        markdown(argv[2])
    elif len(argv) == 4 and argv[1] == 'man':
        man(argv[2], argv[3])
    else:
        sys.stderr.write('usage: gen_api.py markdown HEADER | man HEADER VERSION\n')
        return 2
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
