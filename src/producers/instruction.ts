import { z } from 'zod';

/**
 * What a user asks for. Its own module so the CLI checks an instruction argument before it loads
 * the client (and BullMQ with it), with the very rule a submit applies.
 */
export const Instruction = z.string().trim().min(1, 'instruction must not be empty').max(100_000);
