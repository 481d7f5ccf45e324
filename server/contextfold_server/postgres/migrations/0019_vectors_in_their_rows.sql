-- An entry's vector stays in its row. Postgres moves a row's largest values out of it, into the table's TOAST
-- table, once the row passes about 2 kB: a vector of 384 dimensions (1.5 kB) is the largest, and a turn of
-- more than a few hundred characters took it out (six in ten of LoCoMo's). Every search reads the vector of
-- each entry it weighs, and one kept out is one more index lookup and page read: similarity's statement ran
-- in 0.34 ms with LoCoMo's vectors in their rows against 0.73 ms with them out, the default's in 0.71 and
-- 1.41 ms against 1.12 and 1.60 ms (medians of 200 questions). Rows of up to about 4 kB now stay whole (two
-- to a page): vectors of up to 768 dimensions with their text. Larger ones are moved out as before, and the
-- entries written before this keep their layout until their vector is written again.
ALTER TABLE contextfold.memories SET (toast_tuple_target = 4080);
