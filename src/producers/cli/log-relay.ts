import type { DestinationStream } from 'pino';

/** What a live view lets a log line past: clear the frame, and draw it again after the line. */
export interface LiveFrame {
  clear(): void;
  redraw(): void;
}

/**
 * The log destination of a command that runs roles and may draw a live frame (`orq run`): lines
 * go to `stream`, and while a frame is on the terminal each line is written above it instead. A
 * line written under log-update's frame would be taken for part of it and erased, or leave
 * pieces of the old frame behind, at the next redraw.
 */
export class LogRelay implements DestinationStream {
  private frame: LiveFrame | undefined;

  constructor(private readonly stream: NodeJS.WritableStream = process.stderr) {}

  write(line: string): void {
    this.frame?.clear();
    this.stream.write(line);
    this.frame?.redraw();
  }

  /** Lines are written above `frame` until the returned function is called. */
  above(frame: LiveFrame): () => void {
    this.frame = frame;
    return () => {
      if (this.frame === frame) this.frame = undefined;
    };
  }
}
