/**
 * The YAML our ops files are written in, and no more: block mappings and sequences by
 * indentation, plain and quoted one-line scalars, whole-line comments. Anything else (flow
 * collections, block scalars, anchors, trailing comments) is refused with its line number, so
 * the file stays readable by this and by Prometheus alike.
 */

export type YamlValue = string | YamlValue[] | { [key: string]: YamlValue };

interface Line {
  number: number;
  indent: number;
  text: string;
}

export function parseYamlSubset(source: string): YamlValue {
  const lines: Line[] = [];
  source.split("\n").forEach((raw, i) => {
    const text = raw.trimEnd();
    if (text.trim() === "" || text.trim().startsWith("#")) return;
    if (raw.includes("\t")) throw new Error(`line ${i + 1}: tabs are not YAML indentation`);
    lines.push({ number: i + 1, indent: text.length - text.trimStart().length, text: text.trimStart() });
  });
  const [value, next] = block(lines, 0, lines[0]?.indent ?? 0);
  if (next < lines.length) throw new Error(`line ${lines[next]!.number}: unexpected indentation`);
  return value;
}

function block(lines: Line[], at: number, indent: number): [YamlValue, number] {
  return lines[at]?.text.startsWith("- ") ? sequence(lines, at, indent) : mapping(lines, at, indent);
}

function sequence(lines: Line[], at: number, indent: number): [YamlValue[], number] {
  const items: YamlValue[] = [];
  let i = at;
  while (i < lines.length && lines[i]!.indent === indent && lines[i]!.text.startsWith("- ")) {
    const line = lines[i]!;
    // "- key: value" opens a mapping whose keys sit two columns in.
    const rest: Line = { number: line.number, indent: indent + 2, text: line.text.slice(2).trimStart() };
    if (/^[^"'][^:]*:( |$)/.test(rest.text)) {
      const [item, next] = mapping([rest, ...lines.slice(i + 1)], 0, indent + 2);
      items.push(item);
      i += next;
    } else {
      items.push(scalar(rest.text, line.number));
      i++;
    }
  }
  return [items, i];
}

function mapping(lines: Line[], at: number, indent: number): [{ [key: string]: YamlValue }, number] {
  const map: { [key: string]: YamlValue } = {};
  let i = at;
  while (i < lines.length && lines[i]!.indent === indent && !lines[i]!.text.startsWith("- ")) {
    const line = lines[i]!;
    const match = /^([A-Za-z0-9_.-]+):(?: (.*))?$/.exec(line.text);
    if (!match) throw new Error(`line ${line.number}: expected "key: value", got ${line.text}`);
    const [, key, value] = match;
    if (Object.hasOwn(map, key!)) throw new Error(`line ${line.number}: "${key}" appears twice`);
    i++;
    if (value !== undefined && value.trim() !== "") {
      map[key!] = scalar(value.trim(), line.number);
      continue;
    }
    const child = lines[i];
    // A sequence may sit at its key's own indentation; a mapping must go deeper.
    if (child && (child.indent > indent || (child.indent === indent && child.text.startsWith("- ")))) {
      const [nested, next] = block(lines, i, child.indent);
      map[key!] = nested;
      i = next;
    } else {
      map[key!] = "";
    }
  }
  return [map, i];
}

function scalar(text: string, number: number): string {
  if (text.startsWith('"')) {
    if (!/^"[^"\\]*"$/.test(text)) throw new Error(`line ${number}: only simple double-quoted strings (no escapes)`);
    return text.slice(1, -1);
  }
  if (text.startsWith("'")) {
    if (!/^'(?:[^']|'')*'$/.test(text)) throw new Error(`line ${number}: unterminated single-quoted string`);
    return text.slice(1, -1).replaceAll("''", "'");
  }
  if (/^[[{|>&*!%@`]/.test(text) || / #|: /.test(text)) throw new Error(`line ${number}: outside the YAML subset: ${text}`);
  return text;
}
